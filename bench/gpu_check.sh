#!/usr/bin/env bash
# Issue 27's GPU checks as one prepared run on a lent GPU machine (the workplace's device
# tool, 15 minutes a session): CUDA against the CPU (tests/engine/test_cuda.py), then
# `bench.throughput` on that machine's CPU and GPU in the same run, then
# `bench.fit_many_scaling`. Here, once: `make gpu-prep` (the wheels the machine's image
# lacks into .whl/, d1's readings into .gpu-data/, both ignored by git). Then run
# `bash bench/gpu_check.sh` there, carrying [".whl", ".gpu-data"], with a limit of 540 s
# (its three steps stop at 120, 300 and 100 s; the progress lines come back even then).
# Everything lands under $OUT (the device tool's folder that comes back; else
# bench/results/gpu_check/), at most 8 files. Without a GPU it times the CPU alone: a dry
# run (`PYTHON=.venv/bin/python bash bench/gpu_check.sh`).
set -u
out=${OUT:-bench/results/gpu_check}
mkdir -p "$out"
py=${PYTHON:-python3}
# the image's torch is read-only, so its bytecode was compiled anew in every process
# (4.4 s of a backfill there on 2026-11-28): cache it elsewhere
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/mmdwatch-pycache
if compgen -G ".whl/*.whl" >/dev/null; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/mmdwatch-site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/mmdwatch-site${PYTHONPATH:+:$PYTHONPATH}
fi
# bench.throughput reads d1 from ../shared/data, which does not travel
if [ -d .gpu-data/ltown-delay-dev ] && [ ! -e ../shared/data/ltown-delay-dev ]; then
    mkdir -p ../shared/data
    ln -s "$PWD/.gpu-data/ltown-delay-dev" ../shared/data/ltown-delay-dev
fi
devices=cpu
"$py" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" && devices="cpu cuda"
{
    date -u; nproc; nvidia-smi -L 2>/dev/null
    "$py" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__)"
    echo "devices: $devices"
    timeout 120 "$py" -m pytest -q -p no:cacheprovider tests/engine/test_cuda.py 2>&1 | tail -5
} > "$out/machine_and_test_cuda.txt" 2>&1
# d1's leak day, 33 and 300 simulated sensors, and a month at 33 (816 inspections)
timeout 300 "$py" -m bench.throughput --sensors 33 300 --inspections 24 720 \
    --device $devices --name gpu_check > "$out/throughput.txt" 2>&1
cp bench/results/gpu_check.csv bench/results/gpu_check.md "$out/" 2>/dev/null
timeout 100 "$py" -m bench.fit_many_scaling --devices $devices --counts 16 64 \
    --out "$out" > "$out/fit_many_scaling.txt" 2>&1
ls "$out"
