#!/bin/bash
# The GPU check on a device machine (docs/benchmarks.md, "The GPU check on a device machine"): installs the wheels
# that `python -m benchmarks gpu --bundle` put in .whl/ (carried there), then runs the check for $1 minutes
# (default 9), everything it writes, its whole output included (log.txt), under $OUT. Further arguments go to the
# check: `bash benchmarks/gpu_on_device.sh 4 --device cpu --algorithm-steps 300` rehearses it on a CPU.
set -o pipefail
minutes=${1:-9}
out=${OUT:-gpu-check}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "installing the carried wheels failed" | tee "$out/log.txt"; exit 1; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee "$out/log.txt"
python3 -m benchmarks gpu --minutes "$minutes" --out "$out" "${@:2}" 2>&1 | tee -a "$out/log.txt"
