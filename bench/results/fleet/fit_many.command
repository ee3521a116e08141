python -m bench.fleet --method mmd-baseline  (2026-11-26 07:05-07:24 UTC)
