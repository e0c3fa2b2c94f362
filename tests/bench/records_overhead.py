"""Benchmark: what request records cost a modern ``tools/call``, file sink on versus off.

Starts ``python -m server`` (probe catalog, 127.0.0.1, a free port) once per run, alternating
``MCP_RECORDS=file`` (A) and ``MCP_RECORDS=none`` (B): A B A B ..., the same load every time:
``wrk`` with a Lua script that POSTs the ``echo`` call with the modern headers, or, without
wrk, an httpx load generator with the same number of connections. With ``taskset`` and two
CPUs or more, the server is pinned to one CPU and the load to another. Each run gets a warm-up,
then a timed measurement; a file run also checks that the sink wrote a record per request and
dropped none. Prints requests/s per run, the medians and their ratio (file / none), and exits 1
when the ratio is below ``--min-ratio`` (0.90). Beside each rate: the server's CPU time per
request, split between the event loop's thread and the others (the records writer), read from
/proc: steadier than the rate on a shared machine, and it says which side the records cost. Only
the processes it started are stopped, by PID.

    python tests/bench/records_overhead.py [--runs 10] [--seconds 4] [--connections 16]

Ten runs of each by default (about two minutes): on the machines this was written on, a run's
rate moves 5-15% from the next one's and a server's CPU per request by about 1.5 us from one
start to the next, so a median of three or five puts the ratio anywhere within 0.88-0.92 of
the same code (docs/benchmarks.md, sixth session).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODERN = "2026-07-28"
BODY = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "echo",
            "arguments": {"text": "hello"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
            },
        },
    },
    separators=(",", ":"),
)
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": MODERN,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "echo",
    "User-Agent": "records-overhead-bench",
}
WARMUP_S = 1.0


def lua_script() -> str:
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(BODY)}"]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in HEADERS.items()]
    # Count answers that are not 200 so a broken setup cannot pass for a fast one.
    lines += [
        "local bad = 0",
        "function response(status, headers, body)",
        "  if status ~= 200 then bad = bad + 1 end",
        "end",
        "function done(summary, latency, requests)",
        '  io.write(string.format("bad-status: %d\\n", bad))',
        "end",
    ]
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def pinning() -> tuple[list[str], list[str]]:
    """taskset prefixes for the server and the load, or none."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if shutil.which("taskset") and len(cpus) >= 2:
        return ["taskset", "-c", str(cpus[0])], ["taskset", "-c", str(cpus[1])]
    return [], []


def get_json(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


class Server:
    def __init__(self, records: str, record_file: Path, pin: list[str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
        env.update(
            {
                "MCP_HOST": "127.0.0.1",
                "MCP_PORT": str(self.port),
                "MCP_CATALOG": "probe",
                "MCP_LOG_LEVEL": "warning",
                "MCP_RECORDS": records,
                "MCP_RECORDS_FILE": str(record_file),
                "MCP_DRAIN_TIMEOUT_S": "3",
                "PYTHONPATH": str(ROOT),
            }
        )
        self.log = log.open("wb")
        self.process = subprocess.Popen(
            [*pin, sys.executable, "-m", "server"],
            cwd=record_file.parent,
            env=env,
            stdout=self.log,
            stderr=self.log,
        )

    def wait_ready(self, limit: float = 15.0) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.name}")
            with contextlib.suppress(OSError):
                if get_json(f"{self.url}/readyz")[0] == 200:
                    return
            time.sleep(0.05)
        raise RuntimeError("server did not become ready")

    def records_status(self) -> dict[str, object]:
        status = get_json(f"{self.url}/readyz")[1]["records"]
        assert isinstance(status, dict)
        return status

    def cpu_seconds(self) -> tuple[float, float]:
        """User + system CPU time of the server's event loop (its main thread) and of its
        other threads (the records writer; uvloop's resolver threads stay idle), from /proc."""
        loop = others = 0.0
        try:
            tasks = list(Path(f"/proc/{self.process.pid}/task").iterdir())
        except OSError:
            return float("nan"), float("nan")
        for task in tasks:
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # a thread that ended meanwhile
                continue
            seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            if task.name == str(self.process.pid):
                loop += seconds
            else:
                others += seconds
        return loop, others

    def stop(self) -> None:
        """SIGTERM to this server's PID; SIGKILL to the same PID if it does not exit."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log.close()


def run_wrk(
    url: str, seconds: float, connections: int, script: Path, pin: list[str]
) -> tuple[int, float]:
    """(requests completed, requests/s as wrk measured them); raises on any failure."""
    command = [
        *pin,
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--latency",
        "-s",
        str(script),
        f"{url}/mcp",
    ]
    output = subprocess.run(
        command, capture_output=True, text=True, timeout=seconds + 30, check=True
    ).stdout
    bad = re.search(r"bad-status: (\d+)", output)
    errors = re.search(r"Socket errors: (.*)", output)
    if bad is None or int(bad.group(1)) or "Non-2xx" in output or errors:
        raise RuntimeError(f"wrk saw failures:\n{output}")
    done = re.search(r"(\d+) requests in ", output)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if done is None or rate is None:
        raise RuntimeError(f"unexpected wrk output:\n{output}")
    return int(done.group(1)), float(rate.group(1))


async def _httpx_load(url: str, seconds: float, connections: int) -> int:
    import httpx

    deadline = time.monotonic() + seconds
    count = 0

    async def worker() -> None:
        nonlocal count
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            while time.monotonic() < deadline:
                response = await client.post("/mcp", content=BODY, headers=HEADERS)
                if response.status_code != 200:
                    raise RuntimeError(f"status {response.status_code}: {response.text}")
                count += 1

    await asyncio.gather(*(worker() for _ in range(connections)))
    return count


def httpx_rps(url: str, seconds: float, connections: int) -> float:
    return asyncio.run(_httpx_load(url, seconds, connections)) / seconds


def count_lines(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


def one_run(
    mode: str, number: int, directory: Path, args: argparse.Namespace, use_wrk: bool
) -> tuple[float, float, str]:
    """One server, warmed up then measured: (requests/s, server CPU us per request, note)."""
    server_pin, load_pin = pinning()
    script = directory / "call.lua"
    record_file = directory / f"{mode}-{number}.jsonl"
    server = Server(mode, record_file, server_pin, directory / f"{mode}-{number}.log")
    try:
        server.wait_ready()
        if use_wrk:
            warm, _ = run_wrk(server.url, WARMUP_S, args.connections, script, load_pin)
            cpu_before = server.cpu_seconds()
            done, rps = run_wrk(server.url, args.seconds, args.connections, script, load_pin)
        else:
            warm = round(httpx_rps(server.url, WARMUP_S, args.connections) * WARMUP_S)
            cpu_before = server.cpu_seconds()
            rps = httpx_rps(server.url, args.seconds, args.connections)
            done = round(rps * args.seconds)
        (loop_after, others_after), (loop_before, others_before) = server.cpu_seconds(), cpu_before
        loop_us = (loop_after - loop_before) / done * 1e6
        others_us = (others_after - others_before) / done * 1e6
        cpu_us = loop_us + others_us
        status = server.records_status()
    finally:
        server.stop()
    split = f" = loop {loop_us:.1f} + other threads {others_us:.1f}"
    if mode != "file":
        return rps, cpu_us, split
    written = count_lines(record_file)
    # wrk may leave a few requests unanswered at its deadline; none may be lost.
    if status["dropped"] != 0 or written < warm + done:
        raise RuntimeError(
            f"file sink lost records: {written} lines for {warm + done} requests, status {status}"
        )
    return rps, cpu_us, f"{split}  ({written} records, dropped {status['dropped']})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per configuration (>= 3)")
    parser.add_argument("--seconds", type=float, default=4.0, help="measurement per run")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--min-ratio", type=float, default=0.90)
    parser.add_argument("--load", choices=["auto", "wrk", "httpx"], default="auto")
    args = parser.parse_args()
    runs = max(3, args.runs)
    use_wrk = args.load == "wrk" or (args.load == "auto" and shutil.which("wrk") is not None)
    server_pin, load_pin = pinning()
    pinned = (
        f"server on CPU {server_pin[-1]}, load on CPU {load_pin[-1]}"
        if server_pin
        else "no CPU pinning"
    )
    print(
        f"load: {'wrk' if use_wrk else 'httpx'}, {args.connections} connections, "
        f"{args.seconds:g} s per run after {WARMUP_S:g} s warm-up; {pinned}",
        flush=True,
    )
    results: dict[str, list[float]] = {"file": [], "none": []}
    # Server CPU time per request: far less disturbed by other load on the machine than
    # throughput, so it is printed alongside as a check on the ratio.
    cpu: dict[str, list[float]] = {"file": [], "none": []}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="records-bench-") as temp:
        directory = Path(temp)
        (directory / "call.lua").write_text(lua_script())
        for number in range(runs):
            for mode in ("file", "none"):  # A B A B ...
                rps, cpu_us, note = one_run(mode, number, directory, args, use_wrk)
                results[mode].append(rps)
                cpu[mode].append(cpu_us)
                print(
                    f"run {number + 1} {mode:>4}: {rps:9.0f} req/s  "
                    f"{cpu_us:6.1f} server CPU us/req{note}",
                    flush=True,
                )
    medians = {mode: statistics.median(values) for mode, values in results.items()}
    ratio = medians["file"] / medians["none"]
    for mode, values in results.items():
        print(
            f"median {mode}: {medians[mode]:.0f} req/s (max/min {max(values) / min(values):.2f}),"
            f" {statistics.median(cpu[mode]):.1f} server CPU us/req"
        )
    ratio_cpu = statistics.median(cpu["none"]) / statistics.median(cpu["file"])
    print(f"ratio file/none: {ratio:.3f} (minimum {args.min_ratio:.2f})")
    print(f"CPU-cost ratio none/file (1.0 = records free): {ratio_cpu:.3f}")
    if any(max(values) / min(values) > 1.25 for values in results.values()):
        print("warning: runs of one configuration differ by over 25%: the machine is busy")
    print(f"elapsed: {time.monotonic() - started:.1f} s")
    return 0 if ratio >= args.min_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
