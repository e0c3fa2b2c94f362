"""Fuzz the JSON-RPC codec and the MCP header decoding (bounded; not collected by pytest).

Targets, chosen by the first input byte:

- ``server.jsonrpc.decode``: any bytes either decode to messages (valid ids, re-encodable) or
  raise an ``McpError`` whose ``request_id`` is echoable; nothing else may escape;
- ``server.modern.headers.decode_header_value``: any header value (bytes as Latin-1, as the endpoint
  reads them) is returned trimmed or refused with ``HeaderMismatch``, and every string survives
  the ``=?base64?...?=`` sentinel round trip and the client's ``header_value`` round trip;
- ``server.security.auth.bearer_token``: an ``Authorization`` value gives a token that is a valid
RFC 6750 b64token taken from the value, None, or ``InvalidAuthRequest``.

Run from the repository root::

    python tests/fuzz/fuzz_codec.py                        # atheris, 200,000 runs
    python tests/fuzz/fuzz_codec.py -max_total_time=60     # or a time limit
    python tests/fuzz/fuzz_codec.py -runs=1000000 corpus/  # libFuzzer flags and corpus dirs

With atheris (``pip install atheris``; wheels for CPython 3.11 on Linux x86-64) the run is
coverage-guided: the server modules are instrumented and libFuzzer mutates inputs from a small
built-in seed corpus. Without atheris the script falls back to a plain loop of random and
mutated seed inputs (same targets and checks, ``--runs N``, default 200,000). Either way a
failing input is reported with its bytes and the script exits non-zero.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

try:
    import atheris
except ImportError:  # the fallback loop below
    atheris = None

if atheris is not None:
    with atheris.instrument_imports(include=["server"]):
        from server.errors import HeaderMismatch, McpError
        from server.jsonrpc import (
            Notification,
            Request,
            Response,
            decode,
            encode_error,
            encode_result,
            is_valid_id,
        )
        from server.modern.headers import decode_header_value, header_value
        from server.security.auth import InvalidAuthRequest, bearer_token
else:
    from server.errors import HeaderMismatch, McpError
    from server.jsonrpc import (
        Notification,
        Request,
        Response,
        decode,
        encode_error,
        encode_result,
        is_valid_id,
    )
    from server.modern.headers import decode_header_value, header_value
    from server.security.auth import InvalidAuthRequest, bearer_token

DEFAULT_RUNS = 200_000
B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
SEEDS: list[bytes] = [
    b'\x00{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}',
    b'\x00[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"n"}]',
    b'\x00{"jsonrpc":"2.0","id":7,"result":{}}',
    b'\x00{"jsonrpc":"2.0","id":7,"error":{"code":-1,"message":"x"}}',
    b'\x00{"jsonrpc":"2.0","id":1.5,"method":"x","params":[]}',
    b"\x00[]",
    b"\x01=?base64?aGVsbG8=?=",
    b"\x01 tools/call\t",
    b"\x02Bearer abc.DEF-_~+/123==",
    b"\x02bearer   x",
    b"\x02Basic dXNlcjpwYXNz",
]


def expect(condition: object, what: object) -> None:
    """An invariant (not ``assert``: the checks must hold under ``python -O`` too)."""
    if not condition:
        raise AssertionError(what)


def check_codec(data: bytes) -> None:
    try:
        decoded = decode(data)
    except McpError as error:
        expect(error.request_id is None or is_valid_id(error.request_id), error)
        json.loads(encode_error(error.request_id, error.to_wire()))
        return
    messages = decoded if isinstance(decoded, list) else [decoded]
    expect(messages, "an empty batch must be refused")
    for message in messages:
        if isinstance(message, Request):
            expect(is_valid_id(message.id), message)
            expect(isinstance(message.method, str) and message.method, message)
            expect(isinstance(message.params, dict), message)
            json.loads(encode_result(message.id, message.params))
        elif isinstance(message, Notification):
            expect(isinstance(message.method, str) and message.method, message)
            expect(isinstance(message.params, dict), message)
        else:
            expect(isinstance(message, Response) and is_valid_id(message.id), message)
            expect(message.error is None or isinstance(message.error.get("code"), int), message)
            json.loads(encode_error(message.id, {"code": -1, "message": "echo"}))


def check_header(data: bytes) -> None:
    raw = data.decode("latin-1")  # how the endpoint reads header bytes
    try:
        value = decode_header_value("Mcp-Name", raw)
    except HeaderMismatch:
        pass
    else:
        expect(isinstance(value, str), value)
        trimmed = raw.strip(" \t")
        if not (trimmed.startswith("=?base64?") and trimmed.endswith("?=")):
            expect(value == trimmed, (raw, value))
    # Any string a client may need to send survives the base64 sentinel.
    text = data.decode("utf-8", "replace")
    encoded = "=?base64?" + base64.b64encode(text.encode()).decode() + "?="
    expect(decode_header_value("Mcp-Name", encoded) == text, text)
    # And as the client writes it (plain where it can be), sentinel look-alikes included.
    expect(decode_header_value("Mcp-Name", header_value(text)) == text, text)


def check_authorization(data: bytes) -> None:
    raw = data.decode("latin-1")
    try:
        token = bearer_token(raw)
    except InvalidAuthRequest:
        return
    if token is not None:
        expect(B64TOKEN.fullmatch(token) and token in raw, (raw, token))


TARGETS = (check_codec, check_header, check_authorization)


def one_input(data: bytes) -> None:
    if not data:
        return
    TARGETS[data[0] % len(TARGETS)](data[1:])


# -- without atheris ----------------------------------------------------------------------------


def mutate(seed: bytes, rng: random.Random) -> bytes:
    data = bytearray(seed)
    for _ in range(rng.randint(1, 8)):
        choice = rng.random()
        position = rng.randint(0, len(data)) if data else 0
        if choice < 0.4 and data:
            data[min(position, len(data) - 1)] = rng.randrange(256)
        elif choice < 0.7:
            data[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif data:
            del data[position : position + rng.randint(1, 4)]
    return bytes(data)


def random_loop(runs: int, seed: int) -> int:
    rng = random.Random(seed)
    for run in range(runs):
        if rng.random() < 0.5:
            data = mutate(rng.choice(SEEDS), rng)
        else:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
        try:
            one_input(data)
        except Exception:
            print(f"FAILED on run {run} with input {data!r}", file=sys.stderr)
            raise
    print(f"{runs} inputs, no failures (random loop, seed {seed}; atheris not installed)")
    return 0


def with_runs_joined(argv: list[str]) -> list[str]:
    """``--runs N`` and ``--runs=N`` as libFuzzer's ``-runs=N``; other arguments as given."""
    args: list[str] = []
    rest = iter(argv)
    for arg in rest:
        if arg in ("-runs", "--runs"):
            args.append(f"-runs={next(rest, '')}")
        else:
            args.append(arg[1:] if arg.startswith("--runs=") else arg)
    return args


def main(argv: list[str]) -> int:
    args = with_runs_joined(argv)
    if atheris is None:
        runs = next((int(a.split("=", 1)[1]) for a in args if a.startswith("-runs=")), DEFAULT_RUNS)
        seed = int(os.environ.get("FUZZ_SEED", random.randrange(2**32)))
        return random_loop(runs, seed)
    if not any(arg.startswith(("-runs=", "-max_total_time=")) for arg in args[1:]):
        args.append(f"-runs={DEFAULT_RUNS}")
    if not any(not arg.startswith("-") for arg in args[1:]):
        # No corpus directory given: start from the seeds (written under .cache/, git-ignored;
        # libFuzzer keeps what it finds in memory only).
        directory = ROOT / ".cache" / "fuzz-codec-seeds"
        directory.mkdir(parents=True, exist_ok=True)
        paths = [directory / f"seed-{index}" for index in range(len(SEEDS))]
        for path, seed_bytes in zip(paths, SEEDS, strict=True):
            path.write_bytes(seed_bytes)
        args.append("-seed_inputs=" + ",".join(str(path) for path in paths))
    atheris.Setup(args, one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
