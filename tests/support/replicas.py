"""Several ``python -m server`` replicas sharing one Redis, behind a real round-robin nginx.

    with Replicas(n=2, catalog="tests.support.replica_catalog:catalog") as replicas:
        replicas.url            # nginx, the public base:  POST {url}/mcp, GET {url}/readyz
        replicas.replica_urls   # each replica directly:   POST {replica_url}/mcp

As a script (everything bound to 127.0.0.1, free ports; Ctrl-C or SIGTERM stops it all):

    python tests/support/replicas.py [--catalog conformance] [-n 2] [--keep] [--env MCP_X=Y ...]

prints ``MCP_URL=http://127.0.0.1:PORT/api/mcp`` (the MCP endpoint through nginx), one
``REPLICA_URL=...`` line per replica, ``REDIS_URL=...``, ``WORKDIR=...`` and then ``READY``, and
waits. Records and logs are under WORKDIR (removed on exit unless ``--keep``).

What runs:

- one :class:`~tests.support.redis_server.RedisServer` (started here and closed at the end), or the
  one given with ``redis=`` (left running; each harness uses its own ``MCP_REDIS_PREFIX`` so
  several can share it);
- ``n`` replicas (:class:`~tests.support.deploy_helpers.ServerProcess`, started in parallel),
  each on its own port with the same ``MCP_STATE_SECRET`` and ``MCP_REDIS_URL``,
  ``MCP_TRUSTED_PROXIES=127.0.0.1``, ``MCP_ROOT_PATH=/api`` (the shipped nginx config strips
  that prefix) and its request records in ``WORKDIR/replica-I/records.jsonl``;
- nginx (unless ``nginx=False``) with the shipped ``deploy/nginx/mcp.conf``, the upstream
  rewritten to plain round robin over the replicas: any affinity directive (``hash ...``,
  ``ip_hash``, ...) and the block's comments are removed, should the shipped file pin clients;
  everything else (unbuffered SSE, timeouts, headers, keepalive, the shipped server lines'
  parameters such as ``max_fails``) is kept.

Everything is stopped by its own PID: replicas with SIGTERM (a graceful drain, so their
records are complete once :meth:`Replicas.stop_replicas` returns), nginx with SIGQUIT.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

if __package__ in (None, ""):  # run as a script: make `tests` (and `server`) importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx

from tests.e2e.test_nginx import NGINX, SHIPPED, _wait_for_port, main_config
from tests.support.deploy_helpers import ServerProcess, free_port, read_records, stop_process
from tests.support.redis_server import RedisServer

REPLICA_CATALOG = "tests.support.replica_catalog:catalog"
PREFIX = "/api"  # what the shipped config serves the app under
# Upstream directives that pin a client (or a session) to one replica.
AFFINITY = re.compile(r"(?m)^\s*(hash|ip_hash|sticky|random|least_conn|least_time)\b[^;]*;.*\n")


def round_robin_config(text: str, upstreams: list[str], listen_on: str) -> str:
    """The shipped config with its upstream made plain round robin over ``upstreams`` (the
    servers replaced, any affinity directive removed) and its listen address replaced."""
    block = re.search(r"upstream\s+mcp_app\s*\{.*?\n\}", text, re.S)
    assert block is not None, "deploy/nginx/mcp.conf has no 'upstream mcp_app { ... }'"
    body = AFFINITY.sub("", block.group(0))
    body = re.sub(r"(?m)^\s*#.*\n", "", body)  # its comments explain the affinity
    shipped = re.search(r"(?m)^\s*server\s+\S+?((?:\s+[^;\s]+)*)\s*;", body)
    parameters = shipped.group(1) if shipped else ""  # max_fails=..., weight=...: kept
    body, count = re.subn(r"(?m)^\s*server\s+[^;]+;.*\n", "", body)
    assert count >= 1, "the upstream block lists no server"
    servers = "    # (test config: plain round robin, no affinity)\n" + "".join(
        f"    server {upstream}{parameters};\n" for upstream in upstreams
    )
    body = re.sub(r"\{\n", lambda _: "{\n" + servers, body, count=1)
    assert not re.search(r"(?m)^\s*(hash|ip_hash|sticky)\b", body), body
    text = text[: block.start()] + body + text[block.end() :]
    text, count = re.subn(r"(?m)^(\s*listen\s+)[^;]+;", rf"\g<1>{listen_on};", text)
    assert count == 1, "expected one active listen directive"
    return text


class Nginx:
    """A real nginx (master + one worker) in ``workdir``, stopped by its master's PID."""

    def __init__(self, workdir: Path, upstreams: list[str], worker_connections: int) -> None:
        assert NGINX is not None, "nginx is not installed (apt-get install nginx)"
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "mcp.conf").write_text(
            round_robin_config(SHIPPED.read_text(), upstreams, f"127.0.0.1:{self.port}")
        )
        main = main_config(workdir)
        main, count = re.subn(
            r"worker_connections \d+;", f"worker_connections {worker_connections};", main
        )
        assert count == 1
        (workdir / "nginx.conf").write_text(main)
        self.command = [str(NGINX), "-p", str(workdir), "-c", str(workdir / "nginx.conf")]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Nginx:
        check = subprocess.run([*self.command, "-t"], capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stderr
        log = self.workdir / "nginx.out"
        with log.open("wb") as out:
            self.process = subprocess.Popen(self.command, stdout=out, stderr=out)
        _wait_for_port(self.port, self.process, log)
        return self

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            # SIGQUIT: the master (this PID) ends its workers gracefully.
            stop_process(process, signal.SIGQUIT)


class Replicas:
    """Redis + ``n`` replicas + nginx round robin; a context manager (see the module doc)."""

    def __init__(
        self,
        n: int = 2,
        catalog: str = REPLICA_CATALOG,
        extra_env: dict[str, str] | None = None,
        *,
        redis: RedisServer | None = None,
        nginx: bool = True,
        workdir: Path | None = None,
        worker_connections: int = 1024,
    ) -> None:
        assert n >= 1
        self.n = n
        self.catalog = catalog
        self.extra_env = dict(extra_env or {})
        self.given_redis = redis
        self.redis: RedisServer | None = redis
        self.use_nginx = nginx
        self.worker_connections = worker_connections
        self.owns_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="mcp-replicas-"))
        self.secret = secrets.token_urlsafe(32)
        self.prefix = f"mcp-test-{secrets.token_hex(4)}"
        self.servers: list[ServerProcess] = []
        self.nginx: Nginx | None = None

    # -- what the tests use ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """nginx's public base (with the ``/api`` prefix): ``{url}/mcp``, ``{url}/readyz``."""
        assert self.nginx is not None, "started without nginx"
        return self.nginx.url + PREFIX

    @property
    def replica_urls(self) -> list[str]:
        return [server.url for server in self.servers]

    @property
    def records_files(self) -> list[Path]:
        return [self.workdir / f"replica-{index}" / "records.jsonl" for index in range(self.n)]

    def records(self, kind: str | None = "request") -> list[list[dict[str, Any]]]:
        """The records each replica wrote so far (complete after :meth:`stop_replicas`)."""
        return [
            [record for record in read_records(path) if kind is None or record["kind"] == kind]
            for path in self.records_files
        ]

    def logs(self) -> str:
        return "\n".join(
            f"--- replica {i} ---\n{s.log()[-4000:]}" for i, s in enumerate(self.servers)
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def settings(self, index: int) -> dict[str, str]:
        assert self.redis is not None
        directory = self.workdir / f"replica-{index}"
        return {
            "MCP_CATALOG": self.catalog,
            "MCP_REDIS_URL": self.redis.url,
            "MCP_REDIS_PREFIX": self.prefix,
            "MCP_STATE_SECRET": self.secret,
            "MCP_TRUSTED_PROXIES": "127.0.0.1",
            "MCP_ROOT_PATH": PREFIX,
            "MCP_RECORDS": "file",
            "MCP_RECORDS_FILE": str(directory / "records.jsonl"),
            # Stops stay quick: a replica drains for at most this long.
            "MCP_DRAIN_TIMEOUT_S": "5",
            "MCP_SHUTDOWN_GRACE_S": "1",
            **self.extra_env,
        }

    def start(self) -> Replicas:
        try:
            if self.redis is None:
                self.redis = RedisServer().start()
            self.servers = []
            for index in range(self.n):
                directory = self.workdir / f"replica-{index}"
                directory.mkdir(parents=True, exist_ok=True)
                self.servers.append(ServerProcess(directory, **self.settings(index)))
            with ThreadPoolExecutor(self.n) as pool:
                list(pool.map(lambda server: server.start(timeout=20), self.servers))
            if self.use_nginx:
                upstreams = [f"127.0.0.1:{server.port}" for server in self.servers]
                self.nginx = Nginx(self.workdir / "nginx", upstreams, self.worker_connections)
                self.nginx.start()
                self.wait_ready(self.url)
            for url in self.replica_urls:
                self.wait_ready(url)
        except BaseException:
            self.stop()
            raise
        return self

    @staticmethod
    def wait_ready(base: str, limit: float = 10) -> None:
        deadline = time.monotonic() + limit
        with httpx.Client(timeout=2) as http:  # one client: see ServerProcess.start
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(f"{base}/readyz").status_code == 200:
                        return
                assert time.monotonic() < deadline, f"{base}/readyz did not answer 200"
                time.sleep(0.05)

    def stop_replicas(self) -> None:
        """SIGTERM every replica (in parallel) and wait: their records are then complete."""
        with ThreadPoolExecutor(max(1, len(self.servers))) as pool:
            list(pool.map(ServerProcess.stop, self.servers))

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            if self.nginx is not None:
                self.nginx.stop()
        with contextlib.suppress(Exception):
            self.stop_replicas()
        if self.redis is not None and self.given_redis is None:
            self.redis.close()
            self.redis = None

    def cleanup(self) -> None:
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Replicas:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
        self.cleanup()


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Redis + N replicas + round-robin nginx.")
    parser.add_argument("--catalog", default=REPLICA_CATALOG, help="MCP_CATALOG of the replicas")
    parser.add_argument("-n", "--replicas", type=int, default=2)
    parser.add_argument("--no-nginx", action="store_true", help="replicas and Redis only")
    parser.add_argument("--keep", action="store_true", help="keep WORKDIR (records, logs)")
    parser.add_argument("--workdir", type=Path, help="where records and logs go")
    parser.add_argument(
        "--env", action="append", default=[], metavar="MCP_X=VALUE", help="more settings"
    )
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.env)

    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    replicas = Replicas(
        args.replicas,
        args.catalog,
        extra,
        nginx=not args.no_nginx,
        workdir=args.workdir,
    )
    try:
        replicas.start()
        assert replicas.redis is not None
        if replicas.nginx is not None:
            print(f"MCP_URL={replicas.url}/mcp")
        for url in replicas.replica_urls:
            print(f"REPLICA_URL={url}/mcp")
        print(f"REDIS_URL={replicas.redis.url}")
        print(f"WORKDIR={replicas.workdir}")
        print("READY", flush=True)
        while not stopping:
            time.sleep(0.2)
            for index, server in enumerate(replicas.servers):
                if server.process is not None and server.process.poll() is not None:
                    if stopping:  # Ctrl-C in a terminal reaches the whole process group
                        break
                    print(f"replica {index} exited:\n{server.log()[-2000:]}", file=sys.stderr)
                    return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        replicas.stop()
        if not args.keep:
            replicas.cleanup()
        print("stopped", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
