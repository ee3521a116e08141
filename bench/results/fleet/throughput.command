python -m bench.fleet --method mmd-baseline --skip sites costs fit_many  (2026-11-26 07:29 UTC)
