python -m bench.fleet --skip sites costs fit_many  (2026-11-26 07:52 UTC)
