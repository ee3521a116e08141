python -m bench.fleet --skip throughput costs fit_many  (2026-11-26 08:12 UTC)
