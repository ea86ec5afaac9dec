#!/usr/bin/env bash
# Issue 53's DiLoCo quality grid (benchmarks.quality_grid) on the lent 16-core machine, in one
# call (../shared/DEVICE.md). The device runs .device/proj, a `git archive` of HEAD made by
# device_prep: after committing, refresh it here first:
#   rm -rf .device/proj && mkdir .device/proj && git archive HEAD | tar -x -C .device/proj
# then DEVICE.md's c1 and c2 calls, then at once:
#   run(command="bash benchmarks/device_quality.sh", timeout_s=480,
#       carry=[".device/c3", ".device/small", ".device/proj", ".device/run.sh"])
# 8 children of 2 cores at once; no fit starts after DEADLINE seconds (default 210), the
# last ones end or are stopped at most twice the longest fit later. The grid's order is its
# priority: every_step and local_sgd first, then the diloco candidates in CANDIDATES' order,
# each cell with all its seeds, so a run cut by the deadline drops the last candidates whole.
# Environment: DEADLINE, QUALITY_PARALLEL (8), QUALITY_CORES (2), PRIOR (an earlier call's
# quality.jsonl saved in this checkout, e.g. an untracked results/quality-1.jsonl: its cells
# are skipped and summed in). Arguments go to quality_grid (e.g. --only 'cnn_synthetic/*').
# Brings back under $OUT: quality.jsonl (a row per fit, written as each ends), quality.md
# (the tables) and quality.log (the progress lines).
set -u
cd "$(dirname "$0")/.."
: "${OUT:?OUT must name the folder whose files come back}"
OUT=$(realpath "$OUT")  # run.sh runs the grid from .device/proj
export QUALITY_PARALLEL=${QUALITY_PARALLEL:-8} QUALITY_CORES=${QUALITY_CORES:-2}
deadline=${DEADLINE:-210}
args=(--out "$OUT" --deadline "$deadline")
if [ -n "${PRIOR:-}" ]; then args+=(--prior "$(realpath "$PRIOR")"); fi
echo "cores: $(nproc), load: $(cut -d' ' -f1 /proc/loadavg), $(python3 --version)"
# run.sh unpacks TensorFlow on a fresh machine (tens of seconds), then runs in .device/proj.
timeout $((deadline + 300)) bash .device/run.sh \
  python3 -m benchmarks.quality_grid "${args[@]}" "$@" 2>&1 | tee "$OUT/quality.log"
exit "${PIPESTATUS[0]}"
