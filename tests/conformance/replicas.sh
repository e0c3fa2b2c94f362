#!/usr/bin/env bash
# The conformance suites against two replicas sharing Redis, through a round-robin nginx.
#
#   tests/conformance/replicas.sh [legacy|modern|extensions|all]      (default: all)
#
# Starts `python tests/support/replicas.py --catalog conformance` (one redis-server, two
# `python -m server` replicas with the same MCP_STATE_SECRET and MCP_REDIS_URL, nginx with the
# shipped deploy/nginx/mcp.conf made plain round robin: no affinity), then runs
#   MCP_CONFORMANCE_URL=<nginx>/api/mcp tests/conformance/run.sh legacy
#   MCP_CONFORMANCE_URL=<nginx>/api/mcp tests/conformance/run.sh modern
#   MCP_CONFORMANCE_URL=<nginx>/api/mcp tests/conformance/run.sh extensions
# so every request of the suites may land on either replica. Prints each run's output (one
# `PASS name` / `FAIL name (...)` line per scenario and `N passed, M failed`), then one line
# per run, `replicas legacy: N passed, M failed`, and stops everything it started (the
# harness, by its PID; the harness stops its replicas, nginx and Redis by theirs).
# Exits non-zero if any run failed.
#
# Environment: PYTHON (default: python), and everything run.sh reads (MCP_CONFORMANCE_HOME,
# MCP_CONFORMANCE_LOGS, ...). The replicas' logs and records stay in the directory printed
# at the end (REPLICAS_WORKDIR, default: a new temporary directory).
set -euo pipefail

MODE="${1:-all}"
case "$MODE" in
  legacy) RUNS=(legacy) ;;
  modern) RUNS=(modern) ;;
  extensions) RUNS=(extensions) ;;
  all) RUNS=(legacy modern extensions) ;;
  -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
  *) echo "usage: $0 [legacy|modern|extensions|all]" >&2; exit 2 ;;
esac

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
PY="${PYTHON:-python}"
WORK="${REPLICAS_WORKDIR:-$(mktemp -d "${TMPDIR:-/tmp}/mcp-replicas-conformance-XXXXXX")}"
mkdir -p "$WORK"
HARNESS_OUT="$WORK/harness.out"

HARNESS_PID=""
stop_harness() {
  if [[ -n "$HARNESS_PID" ]] && kill -0 "$HARNESS_PID" 2>/dev/null; then
    kill -TERM "$HARNESS_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 300); do  # the harness drains the replicas gracefully: up to ~30 s
      kill -0 "$HARNESS_PID" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$HARNESS_PID" 2>/dev/null; then
      echo "replicas.sh: the harness did not stop; killing it (pid $HARNESS_PID)" >&2
      kill -KILL "$HARNESS_PID" 2>/dev/null || true
    fi
    wait "$HARNESS_PID" 2>/dev/null || true
  fi
  HARNESS_PID=""
}
cleanup() {
  local rc=$?
  stop_harness
  echo "replicas' logs and records: $WORK" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

(
  cd "$REPO_ROOT"
  exec "$PY" tests/support/replicas.py --catalog conformance --workdir "$WORK" --keep
) >"$HARNESS_OUT" 2>&1 &
HARNESS_PID=$!

deadline=$(( SECONDS + 60 ))
until grep -q '^READY$' "$HARNESS_OUT" 2>/dev/null; do
  if ! kill -0 "$HARNESS_PID" 2>/dev/null; then
    cat "$HARNESS_OUT" >&2
    echo "replicas.sh: error: the harness exited before it was ready" >&2
    exit 1
  fi
  if (( SECONDS > deadline )); then
    cat "$HARNESS_OUT" >&2
    echo "replicas.sh: error: the harness was not ready within 60 s" >&2
    exit 1
  fi
  sleep 0.2
done
URL="$(sed -n 's/^MCP_URL=//p' "$HARNESS_OUT" | head -n 1)"
[[ -n "$URL" ]] || { cat "$HARNESS_OUT" >&2; echo "replicas.sh: error: no MCP_URL" >&2; exit 1; }
grep -E '^(MCP_URL|REPLICA_URL|REDIS_URL)=' "$HARNESS_OUT" >&2

declare -A TOTALS=()
failed=0
for run in "${RUNS[@]}"; do
  echo "== conformance $run through nginx, round robin over 2 replicas sharing Redis: $URL"
  out="$WORK/conformance-$run.txt"
  rc=0
  MCP_CONFORMANCE_URL="$URL" PYTHON="$PY" bash "$SCRIPT_DIR/run.sh" "$run" 2>&1 | tee "$out" || rc=$?
  TOTALS[$run]="$(tail -n 1 "$out")"
  (( rc == 0 )) || failed=1
done

stop_harness
echo "== summary (through nginx, round robin over 2 replicas sharing Redis)"
for run in "${RUNS[@]}"; do
  # Per suite: the scenario lines of run.sh carry the suite as a prefix (legacy) or are the
  # 2026-07-28 requirements plus the two pending header scenarios (modern).
  "$PY" - "$WORK/conformance-$run.txt" "$run" <<'PYEOF'
import re, sys
path, run = sys.argv[1], sys.argv[2]
PENDING = {"http-header-validation", "http-custom-header-server-validation"}
counts = {}
for line in open(path, encoding="utf-8", errors="replace"):
    m = re.match(r"^(PASS|FAIL) (\S+)", line)
    if not m:
        continue
    verdict, name = m.groups()
    if run == "extensions":
        suite = "extensions (tasks, skills)"
    elif run == "legacy":
        suite = name.split("/", 1)[0] if "/" in name else "?"
        suite = {"0.1.16": "0.1.16 active suite", "0.1.16-pending": "0.1.16 --suite pending",
                 "alpha-2025-11-25": "alpha --requirements 2025-11-25"}.get(suite, suite)
    else:
        suite = "pending (SEP-2243)" if name in PENDING else "--requirements 2026-07-28"
    passed, total = counts.get(suite, (0, 0))
    counts[suite] = (passed + (verdict == "PASS"), total + 1)
for suite, (passed, total) in counts.items():
    print(f"replicas {run} {suite}: {passed}/{total}")
PYEOF
  echo "replicas $run total: ${TOTALS[$run]}"
done
exit "$failed"
