"""Settings: the only place that reads the environment.

Every field is an ``MCP_*`` variable (or a line in ``.env``) and is mirrored, with a comment,
in ``.env.example``; a test keeps the two in step. Lists are comma-separated.
"""

from __future__ import annotations

import re
import secrets
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

CommaList = Annotated[list[str], NoDecode]

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


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MCP_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    catalog: str = "probe"
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"

    path: str = "/mcp"
    root_path: str = ""
    allowed_hosts: CommaList = ["127.0.0.1", "localhost", "[::1]"]
    allowed_origins: CommaList = []
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    max_batch: int = Field(64, ge=1, le=10_000)

    page_size: int = Field(100, ge=1, le=10_000)
    list_ttl_ms: int = Field(60_000, ge=0)
    discover_ttl_ms: int = Field(300_000, ge=0)
    cache_scope: Literal["public", "private"] = "public"

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

    keepalive_s: float = Field(15.0, gt=0)
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
    auth_token_scopes: CommaList = []
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
    handler_timeout_s: float = Field(300.0, ge=0)

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

    @field_validator(
        "allowed_hosts",
        "allowed_origins",
        "records",
        "records_redact",
        "trusted_proxies",
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
        if value.get_secret_value() and len(value.get_secret_value().encode()) < 16:
            raise ValueError("MCP_STATE_SECRET must be at least 16 bytes (or empty)")
        return value

    @field_validator("auth_tokens")
    @classmethod
    def _token_digests(cls, value: list[str]) -> list[str]:
        digests = [item.lower() for item in value]
        for digest in digests:
            if not _TOKEN_DIGEST.fullmatch(digest):
                raise ValueError(
                    "MCP_AUTH_TOKENS holds sha256:<64 hex digits> digests (python -m server token)"
                )
        return digests

    @field_validator("auth_algorithms")
    @classmethod
    def _asymmetric_algorithms(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in ASYMMETRIC_ALGORITHMS]
        if unknown or not value:
            raise ValueError(
                f"MCP_AUTH_ALGORITHMS: {', '.join(unknown) or '(empty)'} not accepted; use "
                f"asymmetric algorithms only: {', '.join(ASYMMETRIC_ALGORITHMS)}"
            )
        return value

    @field_validator("root_path")
    @classmethod
    def _root_shape(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        return "/" + value.lstrip("/") if value else ""

    @field_validator("path")
    @classmethod
    def _path_shape(cls, value: str) -> str:
        value = "/" + value.strip("/")
        if value == "/":
            raise ValueError("MCP_PATH must name a path below /, such as /mcp")
        return value

    @model_validator(mode="after")
    def _replicas_share_a_secret(self) -> Settings:
        # Replicas must verify each other's cursors and requestState; a per-process key would
        # make every page or retry that lands on another replica fail.
        if self.redis_url.get_secret_value() and not self.state_secret.get_secret_value():
            raise ValueError(
                "MCP_REDIS_URL is set (several replicas): set MCP_STATE_SECRET too, the same on "
                "every replica (python -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        return self

    @model_validator(mode="after")
    def _task_ttl_range(self) -> Settings:
        if not self.task_ttl_min_s <= self.task_ttl_s <= self.task_ttl_max_s:
            raise ValueError(
                "MCP_TASK_TTL_S must lie between MCP_TASK_TTL_MIN_S and MCP_TASK_TTL_MAX_S"
            )
        return self

    def sealing_key(self) -> bytes:
        """The HMAC key for cursors and request state; random per process when unset."""
        secret = self.state_secret.get_secret_value()
        return secret.encode() if secret else secrets.token_bytes(32)
