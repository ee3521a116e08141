# mmdwatch: every target sets up what it needs.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install system-deps test test-fast demo bench gpu-prep lint clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# Exact pin first: pip takes the machine's CPU wheel ($$PIP_FIND_LINKS), not a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The engine part's optimiser in C (engine/native), built for this machine's CPU. A fit
# would build it at first use too; this names a missing compiler at install. Without one
# the engine runs its tensor program (slower on a CPU), so a failed build is no error.
NATIVE := engine/native/_smooth_fit.so
$(NATIVE): engine/native/smooth_fit.c $(STAMP)
	-$(PY) -m engine.native

# mmdwatch's own bytecode, written once: where PYTHONDONTWRITEBYTECODE is set (as on this
# VM) every process would compile its modules again, 0.4 s of CPU a start. On d1's leak-day
# backfill (192 inspections) 3.8-3.9 s with it against 4.1-5.2 s without (2026-12-01); the
# suite starts some 80 such processes. Only sources newer than their bytecode are compiled.
install: $(STAMP) $(NATIVE)
	$(PY) -m compileall -q engine monitor connectors bench >/dev/null

# Real servers for the integration tests (Debian packages; apt does not start them here,
# the pytest fixtures do), and headless Chromium + ChromeDriver for the browser check of the
# reports (tests/report/test_browser.py). Skipped when all are already present.
system-deps:
	@if { ! command -v mosquitto >/dev/null && ! test -x /usr/sbin/mosquitto; } \
			|| ! command -v influxd >/dev/null \
			|| ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		echo "installing mosquitto, influxdb, chromium and chromium-driver (apt)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			mosquitto mosquitto-clients influxdb influxdb-client \
			chromium chromium-driver >/dev/null; \
	fi

# Two test processes (pytest-xdist), one test file each at a time, the files with
# end-to-end tests first (tests/conftest.py). The suite on the 2-core VM of
# 2026-12-01: 6:56 and 7:15 min (.ci/run from a clean clone, install included: 8:46); on
# the slower 2-core VM of 2026-11-30, 10:44 and 11:12, the CPU 90 % busy. Three processes
# took 11:29 there: the suite is CPU-bound, not taken. The 15 slowest tests are listed.
# TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 2

test: install system-deps
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15

test-fast: install
	$(PY) -m pytest -q -m "not integration and not slow"

demo: install
	$(VENV)/bin/mmdwatch demo

bench: install system-deps
	$(PY) -m bench.synthetic --methods cv-aggregation --merge-peers bench/results/synthetic_peers.csv --jobs 2
	$(PY) -m bench.speed
	$(PY) -m bench.ceiling
	$(PY) -m bench.variants
	$(PY) -m bench.mqtt_ingest --e2e 3
	$(PY) -m bench.ingest_load
	$(PY) -m bench.false_alarms --inspections 200 --blocks none 1d
	$(PY) -m bench.false_alarms --inspections 200 --blocks 1d --p-value-only --drift-sd 0.03 --history-days 28 --block-alone --name false_alarms_seasonal_history
	$(PY) -m bench.false_alarms --inspections 200 --blocks 1d --p-value-only --drift-sd 0.03 --history-days 28 --name false_alarms_seasonal_history
	$(PY) -m bench.false_alarms --inspections 200 --blocks 1d --p-value-only --drift-sd 0.08 --history-days 28 --block-alone --name false_alarms_seasonal_history
	$(PY) -m bench.false_alarms --inspections 200 --blocks 1d --p-value-only --drift-sd 0.08 --history-days 28 --name false_alarms_seasonal_history
	$(PY) -m bench.leak_delay --null-seeds 4
	$(PY) -m bench.seeds
	$(PY) -m bench.shape_variants
	$(PY) -m bench.skab --grids 5
	$(PY) -m bench.skab --name skab_engine_weight_0 --options --resample 2s --before 5min --after 30s --every 5s --engine-weight 0
	$(PY) -m bench.skab --name skab_false_incident_30min --options --resample 2s --before 5min --after 30s --every 5s --false-incident-interval 30min
	$(PY) -m bench.skab_injected
	$(PY) -m bench.engine_on_residuals
	$(PY) -m bench.weekend_statistics
	$(PY) -m bench.small_leak
	$(PY) -m bench.fleet
	$(PY) -m bench.throughput --sensors 100 300 --inspections 24 96
	$(PY) -m bench.engine_part_batches --shared
	$(PY) -m bench.fit_many_scaling --devices cpu --jobs 1 -1
	$(PY) -m bench.sensitivity

# ruff on everything, then the type checker on engine/ and monitor/ ([tool.mypy] in
# pyproject.toml; it follows their imports into connectors/).
# For a lent GPU machine (bench/gpu_check.sh): the packages its image (Python 3.12, torch,
# numpy, pandas, pyarrow, scipy) lacks, as wheels in .whl/, and d1's readings in .gpu-data/
GPU_WHEELS := pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
	typing-inspection==0.4.5 apscheduler==3.11.3 tzlocal==5.4.5 jsonschema-rs==0.61.2
gpu-prep: install
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d .whl $(GPU_WHEELS)
	mkdir -p .gpu-data/ltown-delay-dev/d1
	cp ../shared/data/ltown-delay-dev/d1/pressures.csv.gz .gpu-data/ltown-delay-dev/d1/

lint: install
	$(VENV)/bin/ruff check engine connectors monitor bench tests
	$(VENV)/bin/mypy engine monitor

clean:
	rm -rf $(VENV) state .pytest_cache
