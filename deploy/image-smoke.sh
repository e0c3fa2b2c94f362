#!/usr/bin/env bash
# deploy/image-smoke.sh: build the Dockerfile with podman (no Docker engine, no registry) on a
# base image made locally with debootstrap, run the image on 127.0.0.1, and smoke-test it:
# /healthz, /readyz, the HEALTHCHECK, a modern tools/call, a legacy session, a listen stream,
# the non-root user, and a graceful stop that flushes the request records. Then the recipe for
# your own tools (deploy/catalog/Dockerfile) builds on that image with the example folder, and
# its tool is called through the container; a folder with a server.py is refused in one line.
#
# Prints one PASS/FAIL line per check, TIME lines, and a final "N passed, M failed"; exits 1
# if anything failed. When podman cannot be installed or cannot run here it prints a SKIP
# line and exits 0. Everything it keeps (podman storage with the base image and the build
# cache) lives in $IMAGE_SMOKE_CACHE (default .cache/image-smoke, ignored by git and by the
# build context); the container it starts is removed on exit. The first run makes the base
# (~1.5 min); later runs reuse it.
#
# The CA bundle mount below is a fact of machines whose egress re-signs TLS: it lends the
# host's bundle to the build's RUN steps only; nothing of it enters the image.
#
# Usage: bash deploy/image-smoke.sh [--help]
# As root with apt-get, it first installs podman, buildah, debootstrap, runc and curl when any
# is missing. It takes no arguments: --help prints this text, anything else is refused, both
# before anything is installed or built.
set -uo pipefail
usage() { sed -n '2,/^set -uo pipefail/{/^set /d;s/^# \{0,1\}//;p}' "$0"; }
case "${1-}" in
  "") ;;
  -h | --help)
    usage
    exit 0
    ;;
  *)
    echo "image-smoke.sh: unknown argument '$1' (it takes none; --help says what it does)" >&2
    exit 2
    ;;
esac
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
CACHE=${IMAGE_SMOKE_CACHE:-$ROOT/.cache/image-smoke}
BASE_IMAGE=localhost/mcp-smoke-base:bookworm
IMAGE=localhost/mcp-http-server:smoke
NAME=mcp-smoke-$$
LOG=$CACHE/logs
passed=0
failed=0

skip() {
  echo "SKIP: image smoke test: $*"
  exit 0
}
pass() {
  echo "PASS: $1"
  passed=$((passed + 1))
}
fail() {
  echo "FAIL: $1${2:+ ($2)}"
  failed=$((failed + 1))
}
check() { # check NAME DETAIL CONDITION...
  local name=$1 detail=$2
  shift 2
  if "$@"; then pass "$name"; else fail "$name" "$detail"; fi
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
finish() {
  echo "$passed passed, $failed failed"
  ((failed == 0))
  exit $?
}

# -- tools ------------------------------------------------------------------------------------
missing=()
for tool in podman buildah debootstrap runc curl; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing ${missing[*]}"
    apt-get update -qq >/dev/null 2>&1
    apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${missing[@]}" >/dev/null 2>&1 ||
      skip "could not install ${missing[*]} with apt-get"
  else
    skip "${missing[*]} missing and cannot be installed here (needs root and apt-get)"
  fi
fi

mkdir -p "$CACHE" "$LOG"
# Settings this machine needs (see ../shared/deploy-notes.md): lowered ulimits (crun/runc may
# not raise them), runc with cgroupfs (hybrid cgroups), overlay storage inside the cache.
cat >"$CACHE/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
cat >"$CACHE/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$CACHE/storage"
runroot = "$CACHE/run"
EOF
export CONTAINERS_CONF=$CACHE/containers.conf
export CONTAINERS_STORAGE_CONF=$CACHE/storage.conf
export BUILDAH_ISOLATION=chroot

podman info >"$LOG/podman-info.txt" 2>&1 ||
  skip "podman is installed but cannot run here: $(tail -1 "$LOG/podman-info.txt")"

# shellcheck disable=SC2317  # (called by the EXIT trap)
cleanup() {
  podman rm -f -t 5 "$NAME" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# -- base image -------------------------------------------------------------------------------
if podman image exists "$BASE_IMAGE"; then
  echo "TIME: base image cached ($BASE_IMAGE)"
else
  echo "== making the base image with debootstrap (once; cached in $CACHE)"
  started=$(now)
  # shellcheck disable=SC2016  # $(REPO_URI) is apt's template, not the shell's
  mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Created-By: Packages' 'Suite: bookworm' |
    sort -u | head -1)
  mirror=${mirror:-http://deb.debian.org/debian/}
  rm -rf "$CACHE/rootfs"
  if ! debootstrap --variant=minbase --include=python3,python3-venv bookworm "$CACHE/rootfs" \
    "$mirror" >"$LOG/debootstrap.log" 2>&1; then
    tail -5 "$LOG/debootstrap.log"
    fail "base image" "debootstrap failed, see $LOG/debootstrap.log"
    rm -rf "$CACHE/rootfs"
    finish
  fi
  rm -rf "$CACHE/rootfs/var/cache/apt/archives/"*.deb "$CACHE/rootfs/var/lib/apt/lists/"*
  if ! tar -C "$CACHE/rootfs" -c . | podman import -q - "$BASE_IMAGE" >/dev/null; then
    fail "base image" "podman import failed"
    finish
  fi
  rm -rf "$CACHE/rootfs"
  echo "TIME: base image made in $(since "$started") s"
fi

# -- build: cold (no layer cache) then warm ---------------------------------------------------
build=(podman build --pull=never --format docker --build-arg "BASE=$BASE_IMAGE" -t "$IMAGE")
ca=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
[[ -f $ca ]] && build+=(-v "$ca:/etc/ssl/certs/ca-certificates.crt:ro")

started=$(now)
if "${build[@]}" --no-cache . >"$LOG/build-cold.log" 2>&1; then
  cold=$(since "$started")
  pass "image builds from the Dockerfile (cold, no layer cache: $cold s)"
else
  tail -20 "$LOG/build-cold.log"
  fail "image builds from the Dockerfile" "see $LOG/build-cold.log"
  finish
fi
started=$(now)
if "${build[@]}" . >"$LOG/build-warm.log" 2>&1; then
  warm=$(since "$started")
  pass "image rebuilds from the layer cache (warm: $warm s)"
else
  fail "image rebuilds from the layer cache" "see $LOG/build-warm.log"
fi
echo "TIME: image build cold $cold s, warm ${warm:-?} s"

config=$(podman image inspect --format \
  '{{.Config.User}}|{{json .Config.Cmd}}|{{json .Config.Healthcheck.Test}}|{{range .Config.Env}}{{.}} {{end}}' \
  "$IMAGE")
IFS='|' read -r user cmd healthcheck env <<<"$config"
check "image runs as a non-root user ($user)" "$user" test "${user%%:*}" != 0 -a -n "$user"
check "image CMD is python -m server ($cmd)" "$cmd" \
  grep -Eq '^\["python3?","-m","server"\]$' <<<"$cmd"
check "image keeps its HEALTHCHECK (docker format)" "$healthcheck" \
  grep -q '/healthz' <<<"$healthcheck"
check "image trusts no forwarded headers by default" "$env" \
  test "${env/MCP_TRUSTED_PROXIES/}" = "$env"
# (podman's own warnings go to stderr; only the version is on stdout)
redis_client=$(podman run --rm "$IMAGE" python3 -c 'import redis; print(redis.__version__)' \
  2>"$LOG/redis-import.log" || true)
check "image can share state through Redis (redis package $redis_client)" "$redis_client" \
  grep -Eq '^[0-9]+\.[0-9]+' <<<"$redis_client"

# -- run --------------------------------------------------------------------------------------
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
started=$(now)
# Authentication off is refused on 0.0.0.0 unless asked for: this smoke test is the private
# deployment that asks (only this script reaches the loopback-published port).
NOAUTH=(-e MCP_AUTH_ALLOW_NONE_NON_LOOPBACK=true)
if ! podman run -d --name "$NAME" -p "127.0.0.1:$PORT:8000" -e MCP_LOG_LEVEL=warning "${NOAUTH[@]}" "$IMAGE" \
  >"$LOG/run.log" 2>&1; then
  cat "$LOG/run.log"
  fail "container starts" "see $LOG/run.log"
  finish
fi
up=""
for _ in $(seq 1 150); do
  if curl -fsS -m 1 "$URL/healthz" >/dev/null 2>&1; then
    up=$(since "$started")
    break
  fi
  sleep 0.1
done
if [[ -z $up ]]; then
  podman logs "$NAME" 2>&1 | tail -20
  fail "container answers /healthz on 127.0.0.1:$PORT" "not within 15 s"
  finish
fi
pass "container answers /healthz on 127.0.0.1:$PORT ($up s after podman run)"
echo "TIME: container start to /healthz $up s"

ready=$(curl -s -m 2 -o /dev/null -w '%{http_code}' "$URL/readyz")
check "/readyz answers 200" "got $ready" test "$ready" = 200
uid=$(podman exec "$NAME" python3 -c 'import os; print(os.getuid())' 2>/dev/null)
check "the server process runs as uid $uid (not root)" "uid=$uid" test -n "$uid" -a "$uid" != 0
podman healthcheck run "$NAME" >"$LOG/healthcheck.log" 2>&1
hc=$?
check "HEALTHCHECK passes (podman healthcheck run)" "exit $hc: $(tail -1 "$LOG/healthcheck.log")" \
  test "$hc" = 0

META='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
out=$(curl -s -m 5 "$URL/mcp" \
  -H 'Content-Type: application/json' \
  -H 'MCP-Protocol-Version: 2026-07-28' \
  -H 'Mcp-Method: tools/call' \
  -H 'Mcp-Name: add' \
  -d '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3},'"$META"'}}')
check "modern tools/call answers (add 2 3)" "$out" \
  grep -Eq '"structuredContent":\{[^}]*"sum":5(\.0)?[,}]' <<<"$out"

out=$(curl -sN -m 5 "$URL/mcp" \
  -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' \
  -H 'MCP-Protocol-Version: 2026-07-28' \
  -H 'Mcp-Method: tools/call' \
  -H 'Mcp-Name: count_slowly' \
  -d '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"count_slowly","arguments":{"steps":3,"delay_ms":50},"_meta":{"progressToken":"p1","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}')
progress=$(grep -c 'notifications/progress' <<<"$out")
check "modern streaming tools/call: 3 progress frames, then the result" "$out" \
  test "$progress" = 3 -a -n "$(grep 'Counted to 3' <<<"$out")"

headers=$(curl -s -m 5 -D - -o "$LOG/initialize.json" "$URL/mcp" \
  -H 'Content-Type: application/json' \
  -H 'Accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1.0"}}}')
SESSION=$(tr -d '\r' <<<"$headers" | awk -F': ' 'tolower($1) == "mcp-session-id" { print $2 }')
legacy=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream'
  -H 'MCP-Protocol-Version: 2025-11-25' -H "Mcp-Session-Id: $SESSION")
initialized=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$URL/mcp" "${legacy[@]}" \
  -d '{"jsonrpc":"2.0","method":"notifications/initialized"}')
called=$(curl -s -m 5 "$URL/mcp" "${legacy[@]}" \
  -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi from a session"}}}')
deleted=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -X DELETE "$URL/mcp" \
  -H "Mcp-Session-Id: $SESSION" -H 'MCP-Protocol-Version: 2025-11-25')
after=$(curl -s -m 5 -o /dev/null -w '%{http_code}' "$URL/mcp" "${legacy[@]}" \
  -d '{"jsonrpc":"2.0","id":3,"method":"tools/list"}')
check "legacy session: initialize -> id, tools/call, DELETE 200, then 404" \
  "session=$SESSION initialized=$initialized call=$called delete=$deleted after=$after" \
  test -n "$SESSION" -a "$initialized" = 202 -a -n "$(grep 'hi from a session' <<<"$called")" \
  -a "$deleted" = 200 -a "$after" = 404

out=$(curl -sN -m 1.5 "$URL/mcp" \
  -H 'Content-Type: application/json' \
  -H 'Accept: text/event-stream' \
  -H 'MCP-Protocol-Version: 2026-07-28' \
  -H 'Mcp-Method: subscriptions/listen' \
  -d '{"jsonrpc":"2.0","id":"listen-1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},'"$META"'}}')
check "listen stream through the container: the acknowledgement arrives" "$out" \
  grep -q '"method":"notifications/subscriptions/acknowledged".*"listen-1"' <<<"$out"

# -- graceful stop ----------------------------------------------------------------------------
started=$(now)
podman stop -t 30 "$NAME" >/dev/null 2>&1
stopped=$(since "$started")
code=$(podman inspect --format '{{.State.ExitCode}}' "$NAME" 2>/dev/null)
check "podman stop (SIGTERM) ends the server with exit 0 in $stopped s" "exit code $code" \
  test "$code" = 0
rm -f "$LOG/records.jsonl"
podman cp "$NAME:/app/records/mcp-requests.jsonl" "$LOG/records.jsonl" >/dev/null 2>&1
records=$(grep -c '"kind":"request"' "$LOG/records.jsonl" 2>/dev/null)
# add, count_slowly, initialize, initialized, echo, DELETE, tools/list after it, listen
check "request records flushed at stop: ${records:-0} of 8 in /app/records" \
  "see $LOG/records.jsonl" test "${records:-0}" = 8
echo "TIME: podman stop $stopped s"

podman rm -f "$NAME" >/dev/null 2>&1

# -- the Kubernetes security context: read-only root, records on a scratch mount -----------
if podman run -d --name "$NAME" -p "127.0.0.1:$PORT:8000" -e MCP_LOG_LEVEL=warning "${NOAUTH[@]}" \
  --read-only --tmpfs /app/records:rw,mode=0750,U --cap-drop ALL \
  --security-opt no-new-privileges --user 10001:10001 "$IMAGE" >"$LOG/run-restricted.log" 2>&1; then
  for _ in $(seq 1 150); do
    curl -fsS -m 1 "$URL/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  out=$(curl -s -m 5 "$URL/mcp" -H 'Content-Type: application/json' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: echo' \
    -d '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"ro"},'"$META"'}}')
  sleep 0.5 # the record writer flushes every 200 ms
  ready=$(curl -s -m 2 "$URL/readyz")
  check "read-only root, no capabilities: serves, and records still write (/readyz)" \
    "call=$out readyz=$ready" \
    test -n "$(grep '"text":"ro"' <<<"$out")" -a -n "$(grep '"healthy":true,.*"written":1,' <<<"$ready")"
else
  cat "$LOG/run-restricted.log"
  fail "read-only root, no capabilities: container starts" "see $LOG/run-restricted.log"
fi
podman rm -f -t 10 "$NAME" >/dev/null 2>&1

# -- your tools: the recipe on top of the image, with the example folder ----------------------
CATALOG_IMAGE=localhost/mcp-tools:smoke
recipe=(podman build --pull=never --format docker --build-arg "SERVER_IMAGE=$IMAGE"
  -f deploy/catalog/Dockerfile)
[[ -f $ca ]] && recipe+=(-v "$ca:/etc/ssl/certs/ca-certificates.crt:ro")
started=$(now)
if "${recipe[@]}" -t "$CATALOG_IMAGE" deploy/catalog/example >"$LOG/build-catalog.log" 2>&1; then
  pass "the user-catalog recipe builds on the image (deploy/catalog/example, $(since "$started") s)"
  podman run -d --name "$NAME" -p "127.0.0.1:$PORT:8000" -e MCP_LOG_LEVEL=warning "${NOAUTH[@]}" \
    "$CATALOG_IMAGE" >"$LOG/run-catalog.log" 2>&1
  for _ in $(seq 1 150); do
    curl -fsS -m 1 "$URL/healthz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  listed=$(curl -s -m 5 "$URL/mcp" -H 'Content-Type: application/json' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/list' \
    -d '{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{'"$META"'}}')
  names=$(grep -o '"name":"[a-z_]*"' <<<"$listed" | sort -u | tr '\n' ' ')
  check "the image serves your catalog, not the built-in one (tools: $names)" "$listed" \
    test "$names" = '"name":"utc_offset" '
  out=$(curl -s -m 5 "$URL/mcp" -H 'Content-Type: application/json' \
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: utc_offset' \
    -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"utc_offset","arguments":{"zone":"Asia/Kolkata"},'"$META"'}}')
  check "your tool answers through the container (utc_offset Asia/Kolkata: +05:30, tzdata from requirements.txt)" \
    "$out" grep -q '"structuredContent":{"zone":"Asia/Kolkata","utc_offset":"+05:30"}' <<<"$out"
  podman stop -t 30 "$NAME" >/dev/null 2>&1
  code=$(podman inspect --format '{{.State.ExitCode}}' "$NAME" 2>/dev/null)
  check "your image stops on SIGTERM with exit 0" "exit code $code" test "$code" = 0
  podman rm -f "$NAME" >/dev/null 2>&1
else
  tail -20 "$LOG/build-catalog.log"
  fail "the user-catalog recipe builds on the image" "see $LOG/build-catalog.log"
fi
shadow=$CACHE/shadow-context
rm -rf "$shadow" && mkdir -p "$shadow"
cp deploy/catalog/example/tools.py "$shadow/"
echo 'from server import Catalog' >"$shadow/server.py"
if "${recipe[@]}" -t localhost/mcp-shadow:smoke "$shadow" >"$LOG/build-shadow.log" 2>&1; then
  fail "a folder with a server.py is refused by the recipe" "it built; see $LOG/build-shadow.log"
else
  check "a folder with a server.py is refused by the recipe, in one line" \
    "see $LOG/build-shadow.log" grep -q "shadow the server's package (named server)" \
    "$LOG/build-shadow.log"
fi
rm -rf "$shadow"
podman image prune -f >/dev/null 2>&1 # the previous build's layers (the base stays tagged)
finish
