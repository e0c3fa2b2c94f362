"""Settings: the only place that reads the environment.

Every field is an ``MCP_*`` variable (or a line in ``.env``) and is mirrored, with a comment,
in ``.env.example``; a test keeps the two in step. Lists are comma-separated.

For ``python -m server``, :func:`load_settings` turns pydantic's report into one line that
names each bad variable (``MCP_PORT``, not ``port``) and what it takes, :func:`unknown_variables`
names the ``MCP_*`` variables no setting reads (a typo, ``MCP_PORTT``, would otherwise be
silently ignored) with the closest real name, and :func:`logging_choice` reads the log level
and format on their own, so that even a failure to load the rest is reported as asked. The
words of those messages are :mod:`server.settings_errors`'; reading stays here. What each
setting must hold is checked by :mod:`server.settings_checks`, which the validators here call.
"""

from __future__ import annotations

import os
import secrets
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from dotenv import dotenv_values
from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

import server.settings_checks as checks
from server.errors import ConfigurationError
from server.retirement.plan import Plan, PlanError, parse_plan
from server.settings_errors import explain, unknown_warnings

CommaList = Annotated[list[str], NoDecode]

# Never repeated in an error message: the value is a secret, or may hold one (a password).
_SECRET_FIELDS = frozenset({"state_secret", "redis_url", "auth_tokens"})
_SOURCES = SettingsConfigDict(
    env_prefix="MCP_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
)
LogLevel = Literal["debug", "info", "warning", "error", "critical"]
LogFormat = Literal["text", "json"]


class Settings(BaseSettings):
    model_config = _SOURCES
    _token_entries: list[checks.TokenEntry] = PrivateAttr(default_factory=list)
    _retire_plan: Plan = PrivateAttr(default_factory=Plan)
    _quota_entries: list[tuple[str, str, int, int]] = PrivateAttr(default_factory=list)

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    catalog: str = "probe"
    log_level: LogLevel = "info"
    log_format: LogFormat = "text"

    path: str = "/mcp"
    root_path: str = ""
    allowed_hosts: CommaList = ["127.0.0.1", "localhost", "[::1]"]
    allowed_origins: CommaList = []
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # Request headers (431 above): nginx and Apache allow 8 KiB a line and ~100 fields; 64 KiB
    # in all leaves room for a large bearer token and cookies, and bounds what a request holds
    # before it is authenticated.
    max_header_bytes: int = Field(64 * 1024, ge=4096, le=16 * 1024 * 1024)
    max_headers: int = Field(100, ge=16, le=10_000)
    max_header_value_bytes: int = Field(8 * 1024, ge=1024, le=16 * 1024 * 1024)
    max_batch: int = Field(64, ge=1, le=10_000)

    page_size: int = Field(100, ge=1, le=10_000)
    list_ttl_ms: int = Field(60_000, ge=0)
    discover_ttl_ms: int = Field(300_000, ge=0)
    # Empty: private when authentication is on (results may differ per caller), else public.
    cache_scope: Literal["", "public", "private"] = ""
    # Items a caller may not use: listed (403 insufficient_scope on a call, the step-up path)
    # or hidden (left out of its lists, and answered as unknown).
    scoped_items: Literal["listed", "hidden"] = "listed"

    state_secret: SecretStr = SecretStr("")
    request_state_ttl_s: int = Field(600, ge=1)

    max_sessions: int = Field(10_000, ge=1)
    session_idle_timeout_s: float = Field(1800.0, gt=0)
    client_request_timeout_s: float = Field(120.0, gt=0)
    events_per_stream: int = Field(256, ge=1)
    sse_retry_ms: int = Field(1000, ge=0)
    legacy_default_log_level: Literal[
        "debug", "info", "notice", "warning", "error", "critical", "alert", "emergency", "off"
    ] = "debug"

    records: CommaList = ["file"]
    records_file: str = "records/mcp-requests.jsonl"
    records_max_bytes: int = Field(64 * 1024 * 1024, ge=0)
    records_backups: int = Field(5, ge=0)
    records_compress: bool = True
    records_queue: int = Field(100_000, ge=1)
    records_flush_ms: int = Field(200, ge=10, le=10_000)
    records_params: bool = True
    records_params_max_bytes: int = Field(2048, ge=0)
    records_redact: CommaList = [
        "password",
        "passwd",
        "token",
        "secret",
        "authorization",
        "apikey",
        "cookie",
        "credential",
        "privatekey",
    ]
    trusted_proxies: CommaList = []
    # GET /metrics (Prometheus); answered only to these networks, 404 to others.
    metrics: bool = True
    metrics_networks: CommaList = ["127.0.0.1", "::1"]
    # Tenants with a series of their own in mcp_tenant_*_total (the top N by requests; the
    # rest are "other"); 0: no tenant metrics.
    metrics_tenants: int = Field(20, ge=0, le=1000)
    otel: bool = False  # OpenTelemetry spans (the otel extra; OTEL_* configure the export)

    # Keep-alive period of every open response: SSE comments on streams; a call silent this
    # long becomes a stream (server/transport/response_writer.py). Below proxy idle timeouts.
    keepalive_s: float = Field(15.0, gt=0)
    # The 2024-11-05 HTTP+SSE transport beside Streamable HTTP (server/transport/legacy_sse.py).
    sse_transport: bool = True
    sse_transport_path: str = "/sse"
    sse_transport_messages_path: str = "/messages"
    sse_transport_max_pending: int = Field(16, ge=1, le=10_000)
    # What a session's stream may hold unsent (a slow reader) before it is closed.
    sse_transport_max_queued_bytes: int = Field(16 * 1024 * 1024, ge=64 * 1024)
    # What to retire, and when (server/retirement/plan.py): a JSON list such as
    # [{"item": "sse", "sunset": "2027-03-01", "link": "https://...", "brownouts": [...]}].
    retire: str = ""
    # The server card (SEP-2127) at MCP_PATH/server-card and its catalog (server/transport/
    # server_card.py); the card's reverse-DNS name, else one from the request's host.
    server_card: bool = True
    # python -m server doctor's tools (server/app/doctor_tools.py): off unless asked.
    doctor: bool = False
    doctor_max_wait_s: float = Field(120.0, gt=0, le=3600)
    server_card_name: str = ""
    send_timeout_s: float = Field(30.0, gt=0)
    listen_queue_size: int = Field(64, ge=1)
    # At shutdown the app's drain deadline comes first, the server's this much later (never at
    # once: the calls the drain ends need a moment to send their error; serving.server_for).
    shutdown_grace_s: float = Field(2.0, gt=0)
    drain_timeout_s: float = Field(25.0, ge=0)
    coalesce_writes: bool = True

    auth: Literal["none", "tokens", "jwt"] = "none"
    auth_allow_none_non_loopback: bool = False
    auth_tokens: CommaList = []
    # More entries, one a line (# comments): for many tokens (server/settings_checks.token_entry).
    auth_tokens_file: str = ""
    auth_token_scopes: CommaList = []
    # JWT: the claim that names the caller's tenant ("" for none), and a token without it:
    # refused with 403 (reject), or given MCP_AUTH_DEFAULT_TENANT (default).
    auth_tenant_claim: str = ""
    auth_tenant_missing: Literal["reject", "default"] = "reject"
    auth_default_tenant: str = "default"
    # Calls per tenant and tool in a window, counted across replicas in Redis when it is set
    # (server/security/quotas.py): [{"tenant": "acme", "tool": "search", "limit": 5, "per": "1m"}].
    quotas: str = ""
    # When Redis cannot count a quota: let the call through (open) or refuse it with 503 (closed).
    quota_on_redis_failure: Literal["open", "closed"] = "open"
    auth_required_scopes: CommaList = []
    auth_issuer: str = ""
    auth_audience: str = ""
    auth_resource: str = ""
    auth_servers: CommaList = []
    auth_jwks_file: str = ""
    auth_jwks_url: str = ""
    auth_jwks_refresh_s: float = Field(3600.0, gt=0)
    auth_jwks_min_refresh_s: float = Field(30.0, ge=0)
    auth_leeway_s: float = Field(30.0, ge=0, le=300)
    auth_algorithms: CommaList = ["RS256", "ES256"]

    rate_limit_rps: float = Field(50.0, ge=0)
    rate_limit_burst: int = Field(100, ge=1)
    rate_limit_exempt: CommaList = ["127.0.0.1", "::1"]
    max_streams_per_client: int = Field(16, ge=0)
    max_sessions_per_client: int = Field(64, ge=0)
    # With Redis, how long a replica's stream and session slots outlive it there (renewed every
    # third of it while held): a replica that dies frees its clients' slots within this.
    limits_lease_s: float = Field(30.0, ge=1, le=3600)
    handler_timeout_s: float = Field(300.0, ge=0)
    tool_threads: int = Field(40, ge=1, le=1000)

    task_ttl_s: float = Field(3600.0, gt=0)
    task_ttl_min_s: float = Field(10.0, gt=0)
    task_ttl_max_s: float = Field(86_400.0, gt=0)
    task_poll_interval_ms: int = Field(1000, ge=1)
    task_lease_s: float = Field(10.0, ge=1, le=3600)
    max_tasks_per_client: int = Field(100, ge=1)
    max_tasks: int = Field(10_000, ge=1)
    task_result_max_bytes: int = Field(1024 * 1024, ge=1024)

    cors_origins: CommaList = []
    cors_max_age_s: int = Field(600, ge=0)

    redis_url: SecretStr = SecretStr("")
    redis_prefix: str = Field("mcp", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    redis_timeout_s: float = Field(2.0, gt=0, le=60)
    records_redis_stream: str = Field("records", min_length=1, max_length=128)
    records_redis_maxlen: int = Field(1_000_000, ge=1000)

    report_live: bool = False
    report_path: str = "/admin/report"
    report_scope: str = Field("mcp:admin", min_length=1, max_length=128, pattern=r"^[!#-\[\]-~]+$")
    report_refresh_s: float = Field(1.0, gt=0, le=3600)

    @field_validator(
        "allowed_hosts",
        "allowed_origins",
        "records",
        "records_redact",
        "trusted_proxies",
        "metrics_networks",
        "rate_limit_exempt",
        "auth_tokens",
        "auth_token_scopes",
        "auth_required_scopes",
        "auth_servers",
        "auth_algorithms",
        "cors_origins",
        mode="before",
    )
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("state_secret")
    @classmethod
    def _secret_length(cls, value: SecretStr) -> SecretStr:
        checks.state_secret(value.get_secret_value())
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: SecretStr) -> SecretStr:
        return SecretStr(checks.redis_url(value.get_secret_value()))

    @field_validator("auth_algorithms")
    @classmethod
    def _asymmetric_algorithms(cls, value: list[str]) -> list[str]:
        return checks.asymmetric_algorithms(value)

    @field_validator("root_path")
    @classmethod
    def _root_shape(cls, value: str) -> str:
        return checks.root_path(value)

    @field_validator("server_card_name")
    @classmethod
    def _card_name_shape(cls, value: str) -> str:
        return checks.server_card_name(value)

    @field_validator("path")
    @classmethod
    def _path_shape(cls, value: str) -> str:
        return checks.endpoint_path(value, "MCP_PATH", "/mcp")

    @field_validator("report_path")
    @classmethod
    def _report_path_shape(cls, value: str) -> str:
        return checks.endpoint_path(value, "MCP_REPORT_PATH", "/admin/report")

    @field_validator("sse_transport_path", "sse_transport_messages_path")
    @classmethod
    def _sse_path_shape(cls, value: str) -> str:
        return checks.sse_path(value)

    @model_validator(mode="after")
    def _parsed_once(self) -> Settings:
        # Parsed here, once, and kept: start-up refuses what does not parse, and the app is
        # built from what did (each message names its variable, as a field's would).
        self._token_entries = checks.token_entries(self.auth_tokens)
        self.auth_tokens = [entry.text() for entry in self._token_entries]  # digests lowered
        try:
            self._retire_plan = parse_plan(self.retire)
        except PlanError as error:
            raise ValueError(f"MCP_RETIRE: {error}") from None
        self._quota_entries = checks.quotas(self.quotas)
        return self

    @property
    def token_entries(self) -> list[checks.TokenEntry]:
        """``MCP_AUTH_TOKENS``, parsed."""
        return list(self._token_entries)

    @property
    def retire_plan(self) -> Plan:
        """``MCP_RETIRE``, parsed (its phases are read against the clock when asked)."""
        return self._retire_plan

    @property
    def quota_entries(self) -> list[tuple[str, str, int, int]]:
        """``MCP_QUOTAS``, parsed: (tenant, tool, limit, window seconds) each."""
        return list(self._quota_entries)

    @model_validator(mode="after")
    def _apart_and_in_range(self) -> Settings:
        sse = (self.sse_transport_path, self.sse_transport_messages_path)
        checks.paths_apart(self.path, self.report_path, sse if self.sse_transport else ())
        checks.replicas_share_a_secret(
            self.redis_url.get_secret_value(), self.state_secret.get_secret_value()
        )
        checks.task_ttl_range(self.task_ttl_min_s, self.task_ttl_s, self.task_ttl_max_s)
        return self

    def sealing_key(self) -> bytes:
        """The HMAC key for cursors and request state; random per process when unset."""
        secret = self.state_secret.get_secret_value()
        return secret.encode() if secret else secrets.token_bytes(32)


# -- for python -m server: one line per mistake, in the variables' own names ------------------


def load_settings(**overrides: Any) -> Settings:
    """The settings from the environment and ``.env`` (``overrides``, by field name, win); a
    :class:`ConfigurationError` whose one line names every variable that does not validate and
    what it takes."""
    try:
        return Settings(**overrides)
    except ValidationError as invalid:
        raise ConfigurationError(
            explain(invalid, Settings.model_fields, prefix="MCP_", hidden=_SECRET_FIELDS)
        ) from invalid


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """A warning for each ``MCP_*`` variable (in the environment or ``.env``) that no setting
    reads, with the closest real name: pydantic ignores them, so a typo would change nothing
    and say nothing."""
    names = {name.upper() for name in (os.environ if environ is None else environ)}
    env_file = Path(str(_SOURCES.get("env_file")))
    if environ is None and env_file.is_file():
        names |= {name.upper() for name in dotenv_values(env_file)}
    known = [f"MCP_{field.upper()}" for field in Settings.model_fields]
    return unknown_warnings(names, known)


class _LoggingChoice(BaseSettings):
    """The two settings that say how to report, read alone and as plain text."""

    model_config = _SOURCES

    log_level: str = "info"
    log_format: str = "text"


def logging_choice() -> tuple[LogLevel, LogFormat]:
    """(level, format) as configured, or (info, text) for a value that would not validate (the
    settings' own check then names it): how to report even when the settings do not load."""
    try:
        chosen = _LoggingChoice()
    except ValidationError:
        return "info", "text"
    level = chosen.log_level.lower()
    log_format = chosen.log_format.lower()
    return (
        typing.cast(LogLevel, level) if level in typing.get_args(LogLevel) else "info",
        typing.cast(LogFormat, log_format) if log_format in typing.get_args(LogFormat) else "text",
    )


class _LocalEndpoint(BaseSettings):
    """Where this server listens, read alone: for ``python -m server call``'s default URL."""

    model_config = _SOURCES

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    path: str = "/mcp"


def local_endpoint_url() -> str:
    """The endpoint of the server configured here (``MCP_HOST``, ``MCP_PORT``, ``MCP_PATH``;
    a wildcard address is reached on the loopback), or ``http://127.0.0.1:8000/mcp`` when one
    of them would not validate (the server itself refuses to start with it)."""
    try:
        chosen = _LocalEndpoint()
    except ValidationError:
        return "http://127.0.0.1:8000/mcp"
    host = chosen.host.strip() or "127.0.0.1"
    if host in ("0.0.0.0", "::", "[::]"):
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address in a URL
    path = "/" + chosen.path.strip().strip("/")
    return f"http://{host}:{chosen.port}{path if path != '/' else '/mcp'}"
