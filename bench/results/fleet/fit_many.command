python -m bench.fleet --skip throughput sites costs  (2026-11-26 07:53 UTC)
