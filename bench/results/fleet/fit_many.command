python -m bench.fleet --skip sites costs  (2026-11-26 09:39 UTC)
