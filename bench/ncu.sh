#!/usr/bin/env bash
# Nsight Compute (ncu) on chosen kernels of a command, one launch each, with the sections that say what
# bounds a kernel: speed of light (DRAM and SM throughput, duration), memory workload (bytes moved, L2 hit
# rate), warp state (stall reasons), scheduler (issue rate), occupancy, launch shape and source counters
# (the SASS lines warps stall at most). Clocks run as they
# do outside the profiler (not locked to base); caches are flushed before each replay pass, so weights come
# from DRAM as in a decode step. A kernel is timed alone: the overlap a programmatic launch gives its
# neighbours in a step does not show here (bench/decode-timeline.ts times the step as it runs).
#
#   bash bench/ncu.sh OUT_PREFIX NAME=REGEX[@SKIP] [NAME=REGEX[@SKIP] ...] -- COMMAND ...
#
# Each target reruns COMMAND under ncu and profiles the first launch whose kernel name matches REGEX after
# SKIP matching ones (default 0), into OUT_PREFIX-NAME.txt. Needs ncu (/usr/local/cuda/bin/ncu or PATH)
# and profiling rights (RmProfilingAdminOnly 0; the lent H200 has both).
# NCU_SOURCE=1: the report is also saved (OUT_PREFIX-NAME.ncu-rep, removed after unless NCU_KEEP_REP=1) and
# its source page read back per SASS instruction (OUT_PREFIX-NAME-sass.csv: address, instruction, the warp
# stall samples at it) with the instructions that hold the most samples in OUT_PREFIX-NAME-stalls.txt.
set -uo pipefail
prefix=$1; shift
targets=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do targets+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || { echo "bench/ncu.sh: no command after --" >&2; exit 2; }
[ ${#targets[@]} -gt 0 ] || { echo "bench/ncu.sh: no NAME=REGEX target before --" >&2; exit 2; }
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
[ -x "$ncu" ] || { echo "bench/ncu.sh: ncu not found (PATH or /usr/local/cuda/bin)" >&2; exit 2; }
status=0
for target in "${targets[@]}"; do
  name=${target%%=*}; spec=${target#*=}
  [ "$name" != "$target" ] && [ -n "$spec" ] || { echo "bench/ncu.sh: target '$target' is not NAME=REGEX[@SKIP]" >&2; exit 2; }
  regex=${spec%@*}; skip=0
  [ "$regex" != "$spec" ] && skip=${spec##*@}
  options=(--clock-control none --cache-control all -k "regex:$regex" -s "$skip" -c 1
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats
    --section Occupancy --section LaunchStats --section SourceCounters)
  if [ "${NCU_SOURCE:-0}" = 1 ]; then
    rep="$prefix-$name.ncu-rep"
    "$ncu" "${options[@]}" -f -o "${rep%.ncu-rep}" "$@" > "$prefix-$name.log" 2>&1 || status=$?
    "$ncu" --import "$rep" > "$prefix-$name.txt" 2>&1 || status=$?
    "$ncu" --import "$rep" --page source --print-source sass --csv > "$prefix-$name-sass.csv" 2>&1 || status=$?
    python3 "$(dirname "$0")/ncu-stalls.py" "$prefix-$name-sass.csv" > "$prefix-$name-stalls.txt" 2>&1 || status=$?
    [ "${NCU_KEEP_REP:-0}" = 1 ] || rm -f "$rep"
  else
    "$ncu" "${options[@]}" "$@" > "$prefix-$name.txt" 2>&1 || status=$?
  fi
  # The report's first lines: which kernel, its duration and DRAM throughput (the rest is in the file).
  echo "$name: $(grep -m1 -E '\(([0-9]+, ){2}[0-9]+\)x\(' "$prefix-$name.txt" | sed 's/^ *//' | cut -c1-100) | $(grep -m1 -E '^\s+Duration ' "$prefix-$name.txt" | tr -s ' ' | sed 's/^ //') | $(grep -m1 -E '^\s+DRAM Throughput ' "$prefix-$name.txt" | tr -s ' ' | sed 's/^ //')"
done
exit $status
