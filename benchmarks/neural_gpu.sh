#!/usr/bin/env bash
# Issue 25's GPU figures in one device-tool run of under 10 minutes (benchmarks/neural_gpu.py does
# the work; its docstring says what is printed).
#
# 1. Here, on the machine without a GPU, once, from the repository root (network needed):
#        echo /.gpu/ >> .git/info/exclude
#        bash benchmarks/neural_gpu.sh prepare
#    It puts into .gpu/ (about 15 MB): wheels for Python 3.12 of hybriddeid's dependencies that the
#    GPU image lacks (Faker, python-crfsuite, tomli-w), a copy of MEDDOCAN, and the word clusters the
#    neural tables embed (built from MEDDOCAN train + dev text when benchmarks/meddocan-clusters is
#    missing: several minutes on 2 cores).
# 2. With the device tool:  run(command="bash benchmarks/neural_gpu.sh", carry=[".gpu"], timeout_s=600)
#    Results come back as $OUT/neural_gpu.json and $OUT/neural_gpu.log.
# NEURAL_GPU_TESTS="tests/test_neural.py ..." runs those tests first, on the device's machine (pytest's wheels
#    are fetched by prepare; 90 s at most); NEURAL_GPU_TIMEOUT caps the benchmark (560 s by default).
# Rehearse on a CPU: NEURAL_GPU_ARGS="--device cpu --train-notes 8 --dev-notes 8 --cpu-notes 4
#    --train-minutes 0.05 --jobs 2" OUT=/tmp/out bash benchmarks/neural_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = prepare ]; then
    mkdir -p .gpu/whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .gpu/whl Faker python-crfsuite tomli-w pytest pluggy iniconfig packaging
    rm -rf .gpu/meddocan && mkdir -p .gpu/meddocan
    cp -r ../shared/corpora/meddocan/train ../shared/corpora/meddocan/dev .gpu/meddocan/
    if [ ! -d benchmarks/meddocan-clusters ]; then
        python3 -c 'from pathlib import Path; from hybriddeid.knowledge.build import ensure_clusters; from hybriddeid.pipeline import load_config
ensure_clusters(load_config(Path("benchmarks/meddocan.toml")), [Path(".gpu/meddocan/train/brat"), Path(".gpu/meddocan/dev/brat")], "es")'
    fi
    rm -rf .gpu/clusters && cp -r benchmarks/meddocan-clusters .gpu/clusters
    du -sh .gpu
    exit 0
fi

OUT="${OUT:-/tmp/neural-gpu-out}"
mkdir -p "$OUT"
# hybriddeid itself is installed (its components are found through entry points) beside the wheels of
# what the GPU image lacks (it has torch, numpy, regex and tqdm); offline, with the image's setuptools.
SITE=/tmp/neural-gpu-site
rm -rf "$SITE"
WHEELS=(); ls .gpu/whl/*.whl >/dev/null 2>&1 && WHEELS=(.gpu/whl/*.whl)
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --target "$SITE" \
    . "${WHEELS[@]}"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
DATA=.gpu/meddocan; [ -d "$DATA" ] || DATA=../shared/corpora/meddocan
CLUSTERS=(); [ -d .gpu/clusters ] && CLUSTERS=(--clusters .gpu/clusters)
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    | tee "$OUT/neural_gpu.log"
if [ -n "${NEURAL_GPU_TESTS:-}" ]; then
    # The tests import the checkout's package (pytest puts the checkout first), which finds its
    # resources where an install would copy them.
    [ -e hybriddeid/resources ] || ln -s ../resources hybriddeid/resources
    # shellcheck disable=SC2086
    timeout 90 python3 -m pytest -q -p no:cacheprovider -rs $NEURAL_GPU_TESTS 2>&1 | tail -15 | tee -a "$OUT/neural_gpu.log" || true
fi
# shellcheck disable=SC2086
PYTHONUNBUFFERED=1 timeout "${NEURAL_GPU_TIMEOUT:-560}" python3 benchmarks/neural_gpu.py --data "$DATA" "${CLUSTERS[@]}" --out "$OUT" \
    ${NEURAL_GPU_ARGS:-} 2>&1 | tee -a "$OUT/neural_gpu.log"
