python -m bench.fleet --skip sites costs fit_many  (2026-11-26 09:10 UTC)
