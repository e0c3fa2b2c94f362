"""What each setting must hold to start with: the checks the settings' validators run.

Each check takes plain values (a secret as its text) and returns the value to keep, possibly
normalised (a path with one leading slash), or raises :class:`ValueError` with a message that
names the ``MCP_*`` variable and what it takes (pydantic's report of it is then worded by
:mod:`server.settings_errors`). Pure functions: reading the environment, and declaring which
check guards which field, stay in :mod:`server.settings`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# JWT algorithms a JWKS of public keys can verify. "none" and HS* never: an HMAC "verified"
# with a public key is the classic algorithm-confusion forgery.
ASYMMETRIC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
_TOKEN_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
# A token's name and tenant go into records and log lines: short and plain.
_TOKEN_LABEL = re.compile(r"[A-Za-z0-9._@:/-]{1,64}")
# RFC 6749 scope-token: printable ASCII but space, quote and backslash.
_SCOPE = re.compile(r"[\x21\x23-\x5B\x5D-\x7E]+")
# What deploy/mcp.env.example and deploy/k8s/secret.example.yaml ship in place of the secret:
# a server started with it would sign with a key anyone can read in this repository.
PLACEHOLDER_SECRET_PREFIX = "replace-with"
REDIS_SCHEMES = ("redis", "rediss", "unix")
# The paths the server answers itself (server/app/routing.py): probes, metrics, and the
# metadata documents below /.well-known. The HTTP+SSE paths are routed before them, so one
# of these would turn a liveness probe into a session.
SERVER_PATHS = ("/healthz", "/readyz", "/metrics")
WELL_KNOWN = "/.well-known"
# A path segment a client sends as is (RFC 3986 pchar, less the %-escapes: the router
# compares the decoded path), and never "." or "..", which clients resolve away.
_PLAIN_SEGMENT = re.compile(r"(?!\.\.?$)[A-Za-z0-9._~!$&'()*+,;=:@-]+")


def state_secret(secret: str) -> str:
    """``MCP_STATE_SECRET``: empty (a key of this process alone) or 16 bytes at least, and not
    the examples' placeholder."""
    if secret.startswith(PLACEHOLDER_SECRET_PREFIX):
        raise ValueError(
            "MCP_STATE_SECRET is the placeholder from the examples, which anyone can read: "
            "set your own, the same on every replica (openssl rand -hex 32)"
        )
    if secret and len(secret.encode()) < 16:
        raise ValueError(
            "MCP_STATE_SECRET must be at least 16 bytes (or empty): use openssl rand -hex 32"
        )
    return secret


def redis_url(url: str) -> str:
    """``MCP_REDIS_URL``, trimmed: empty, or a URL redis-py accepts."""
    # redis-py refuses any other URL only when it first connects, with a traceback; the
    # message never repeats the URL (it may hold a password).
    url = url.strip()
    if url and url.partition("://")[0].lower() not in REDIS_SCHEMES:
        raise ValueError(
            "MCP_REDIS_URL must begin with redis://, rediss:// (TLS) or unix://, such as "
            "redis://localhost:6379/0"
        )
    return url


@dataclass(frozen=True)
class TokenEntry:
    """One static token: its digest (lower case), and the name, tenant and scopes it may carry
    (None: the subject ``token:<first 8 hex digits>``, no tenant, ``MCP_AUTH_TOKEN_SCOPES``)."""

    digest: str
    name: str | None = None
    tenant: str | None = None
    scopes: tuple[str, ...] | None = None

    def text(self) -> str:
        parts = [self.digest]
        if self.name is not None:
            parts.append(f"name={self.name}")
        if self.tenant is not None:
            parts.append(f"tenant={self.tenant}")
        if self.scopes is not None:
            parts.append("scopes=" + " ".join(self.scopes))
        return ";".join(parts)


def token_entry(text: str, where: str = "MCP_AUTH_TOKENS") -> TokenEntry:
    """``sha256:<hex>[;name=N][;tenant=T][;scopes=a b]``: a digest, then what it stands for."""
    digest, *attributes = (part.strip() for part in text.strip().split(";"))
    digest = digest.lower()
    if not _TOKEN_DIGEST.fullmatch(digest):
        raise ValueError(
            f"{where}: an entry must start with sha256:<64 hex digits> (python -m server token),"
            f" then ;name=, ;tenant=, ;scopes= as needed"
        )
    found: dict[str, str] = {}
    for attribute in attributes:
        key, equals, value = attribute.partition("=")
        key, value = key.strip(), value.strip()
        if not equals or key not in ("name", "tenant", "scopes") or key in found:
            raise ValueError(
                f"{where}: {attribute!r} after a digest is not name=, tenant= or scopes= (once)"
            )
        if key != "scopes" and not _TOKEN_LABEL.fullmatch(value):
            raise ValueError(
                f"{where}: {key}={value!r} must be 1-64 letters, digits and . _ @ : / -"
            )
        found[key] = value
    scopes = tuple(found["scopes"].split()) if "scopes" in found else None
    bad = [scope for scope in scopes or () if not _SCOPE.fullmatch(scope)]
    if bad:
        raise ValueError(f"{where}: not valid OAuth scope names: {' '.join(bad)}")
    return TokenEntry(digest, found.get("name"), found.get("tenant"), scopes)


def token_entries(values: Sequence[str]) -> list[TokenEntry]:
    """``MCP_AUTH_TOKENS``: entries of :func:`token_entry`; two entries of one digest, or one
    name twice, are refused."""
    entries = [token_entry(value) for value in values]
    check_token_entries(entries, "MCP_AUTH_TOKENS")
    return entries


def check_token_entries(entries: Sequence[TokenEntry], where: str) -> None:
    digests = [entry.digest for entry in entries]
    names = [entry.name for entry in entries if entry.name is not None]
    if len(set(digests)) != len(digests):
        raise ValueError(f"{where}: the same digest twice")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: the same name twice")


def token_file_entries(text: str, path: str) -> list[TokenEntry]:
    """``MCP_AUTH_TOKENS_FILE``: one entry a line; blank lines and ``#`` comments skipped."""
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line and not line.startswith("#"):
            entries.append(token_entry(line, f"{path}:{number}"))
    check_token_entries(entries, path)
    return entries


def asymmetric_algorithms(values: Sequence[str]) -> list[str]:
    """``MCP_AUTH_ALGORITHMS``: at least one, each of :data:`ASYMMETRIC_ALGORITHMS`."""
    unknown = [name for name in values if name not in ASYMMETRIC_ALGORITHMS]
    if unknown or not values:
        raise ValueError(
            f"MCP_AUTH_ALGORITHMS: {', '.join(unknown) or '(empty)'} not accepted; use "
            f"asymmetric algorithms only: {', '.join(ASYMMETRIC_ALGORITHMS)}"
        )
    return list(values)


def root_path(value: str) -> str:
    """``MCP_ROOT_PATH`` as ``/prefix``, or empty."""
    value = value.strip().rstrip("/")
    return "/" + value.lstrip("/") if value else ""


def server_card_name(value: str) -> str:
    """``MCP_SERVER_CARD_NAME``: empty, or a reverse-DNS name with one slash (the card's)."""
    value = value.strip()
    if value and not re.fullmatch(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+", value):
        raise ValueError(
            "MCP_SERVER_CARD_NAME must be a reverse-DNS name with one slash, "
            "such as com.example/weather"
        )
    return value[:200]


def endpoint_path(value: str, variable: str, example: str) -> str:
    """A path the server answers on (``MCP_PATH``, ``MCP_REPORT_PATH``): below ``/``."""
    value = "/" + value.strip("/")
    if value == "/":
        raise ValueError(f"{variable} must name a path below /, such as {example}")
    return value


def sse_path(value: str) -> str:
    """One of the HTTP+SSE transport's two paths: below ``/``, with no query or fragment, one
    a request can reach (the router compares the decoded path as it is), and not one the
    server answers itself."""
    value = "/" + value.strip().strip("/")
    if value == "/" or "?" in value or "#" in value:
        raise ValueError("must name a path below /, such as /sse or /messages")
    if not all(_PLAIN_SEGMENT.fullmatch(each) for each in value[1:].split("/")):
        raise ValueError(
            f"{value!r} is a path no request reaches as written: use letters, digits and "
            "- . _ ~ ! $ & ' ( ) * + , ; = : @ between single slashes (no '.' or '..' "
            "segment, no %-escape, no space), such as /sse or /messages"
        )
    if value in SERVER_PATHS or value == WELL_KNOWN or value.startswith(WELL_KNOWN + "/"):
        raise ValueError(
            f"{value} is answered by the server itself ({', '.join(SERVER_PATHS)} and "
            f"{WELL_KNOWN}/...): choose another path, such as /sse or /messages"
        )
    return value


def paths_apart(path: str, report_path: str, sse_paths: Sequence[str] = ()) -> None:
    """The report, and the HTTP+SSE transport's paths when it is on, beside the MCP path."""
    if report_path in (path, path + "/"):
        raise ValueError("MCP_REPORT_PATH must differ from MCP_PATH")
    if sse_paths:
        paths = [path, report_path, *sse_paths]
        if len({each.rstrip("/") for each in paths}) != len(paths):
            raise ValueError(
                "MCP_SSE_TRANSPORT_PATH and MCP_SSE_TRANSPORT_MESSAGES_PATH must differ "
                "from each other, from MCP_PATH and from MCP_REPORT_PATH"
            )


def replicas_share_a_secret(redis_url: str, state_secret: str) -> None:
    """Several replicas (``MCP_REDIS_URL``) sign with one ``MCP_STATE_SECRET``."""
    # Replicas must verify each other's cursors and requestState; a per-process key would
    # make every page or retry that lands on another replica fail.
    if redis_url and not state_secret:
        raise ValueError(
            "MCP_REDIS_URL is set (several replicas): set MCP_STATE_SECRET too, the same on "
            "every replica (python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )


def task_ttl_range(minimum_s: float, ttl_s: float, maximum_s: float) -> None:
    """``MCP_TASK_TTL_S`` within its bounds."""
    if not minimum_s <= ttl_s <= maximum_s:
        raise ValueError(
            "MCP_TASK_TTL_S must lie between MCP_TASK_TTL_MIN_S and MCP_TASK_TTL_MAX_S"
        )


_WINDOW = re.compile(r"(\d+)\s*(s|m|h|d)")
_WINDOW_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_QUOTAS = 256


def json_list(text: str, most: int, what: str) -> list[Any]:
    """A setting's JSON list of at most ``most`` entries (``what`` they are); a ValueError
    saying what it is not, for the caller to put after the setting's name."""
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON ({error.msg} at character {error.pos})") from None
    if not isinstance(entries, list) or len(entries) > most:
        raise ValueError(f"a JSON list of at most {most} {what}")
    return entries


def quotas(text: str) -> list[tuple[str, str, int, int]]:
    """``MCP_QUOTAS``: a JSON list of ``{"tenant", "tool", "limit", "per"}`` (``*`` for any
    tenant or tool; ``per`` such as ``1m``), as (tenant, tool, limit, window seconds)."""
    if not text.strip():
        return []
    try:
        entries = json_list(text, MAX_QUOTAS, "quotas")
    except ValueError as error:
        raise ValueError(f"MCP_QUOTAS is {error}") from None
    found = []
    for entry in entries:
        if not isinstance(entry, dict) or set(entry) - {"tenant", "tool", "limit", "per"}:
            raise ValueError(f'MCP_QUOTAS: {entry!r} is not {{"tenant", "tool", "limit", "per"}}')
        tenant, tool = entry.get("tenant", "*"), entry.get("tool", "*")
        limit, per = entry.get("limit"), entry.get("per", "1m")
        window = _WINDOW.fullmatch(per.strip()) if isinstance(per, str) else None
        if not isinstance(tenant, str) or not isinstance(tool, str) or not tenant or not tool:
            raise ValueError(f"MCP_QUOTAS: tenant and tool are names (or *), in {entry!r}")
        if type(limit) is not int or limit < 1:
            raise ValueError(f"MCP_QUOTAS: limit must be a whole number above 0, in {entry!r}")
        if window is None or int(window.group(1)) < 1:
            raise ValueError(f"MCP_QUOTAS: per must be like 30s, 1m, 1h or 1d, in {entry!r}")
        seconds = int(window.group(1)) * _WINDOW_S[window.group(2)]
        found.append((tenant, tool, limit, seconds))
    return found
