#!/usr/bin/env bash
# Instructions per request of the app in process (tests/bench/app_inprocess.py under callgrind):
# a deterministic A/B for hot-path changes on a machine whose timings are noisy. Each workload
# runs twice per tree (N1 and N2 requests); the difference divided by N2-N1 leaves out start-up.
#
#   bash tests/bench/instructions.sh [OTHER_TREE]      # this tree, and OTHER_TREE if given
#   WORKLOADS="call legacy" N1=1000 N2=3000 bash tests/bench/instructions.sh /work/base
#
# Needs valgrind (Debian package). About 40 s per run: 6 runs per tree with the defaults.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
default_python="$here/.venv/bin/python"
[[ -x "$default_python" ]] || default_python="$(command -v python3)"
python="${PYTHON:-$default_python}"
n1="${N1:-1000}"
n2="${N2:-3000}"
trees=("$here")
if (($# > 0)); then trees+=("$(cd "$1" && pwd)"); fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for workload in ${WORKLOADS:-call legacy list}; do
  for tree in "${trees[@]}"; do
    totals=()
    for n in "$n1" "$n2"; do
      if ! (cd "$tree/tests/bench" && PYTHONHASHSEED=0 valgrind --tool=callgrind \
        --callgrind-out-file="$out/cg" "$python" app_inprocess.py --workload "$workload" \
        --rounds 1 --requests "$n" >"$out/log" 2>&1); then
        cat "$out/log" >&2
        exit 1
      fi
      totals+=("$(awk '/^(summary|totals):/ {print $2; exit}' "$out/cg")")
    done
    per=$(((totals[1] - totals[0]) / (n2 - n1)))
    echo "$workload $tree: $per instructions per request"
  done
done
