"""Protocol constants shared by both eras: versions, ``_meta`` keys, method names, log levels.

Pure data, so every layer can name the protocol the same way without importing each other.
:data:`JSONObject` names the shape most messages and params have, for new signatures to use.
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias

# A decoded JSON object: a message, its params, a result.
JSONObject: TypeAlias = dict[str, Any]

MODERN_VERSION: Final = "2026-07-28"
MODERN_VERSIONS: Final = ("2026-07-28",)
# Newest first: the order version negotiation prefers.
LEGACY_VERSIONS: Final = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
# Priming events (an id with empty data) confuse clients older than 2025-11-25.
PRIMING_SINCE: Final = "2025-11-25"

META_PROTOCOL_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO: Final = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION_ID: Final = "io.modelcontextprotocol/subscriptionId"

# RFC 5424 order: a message is sent when its rank is >= the requested level's rank.
LOG_LEVELS: Final = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
LOG_LEVEL_RANK: Final = {level: rank for rank, level in enumerate(LOG_LEVELS)}

# Methods whose 2026-07-28 results are cacheable and MUST carry ttlMs and cacheScope.
CACHEABLE_METHODS: Final = frozenset(
    {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)
# The only methods that may answer with an input-required result (MRTR).
INPUT_REQUIRED_METHODS: Final = frozenset({"tools/call", "prompts/get", "resources/read"})
# Every method either era may serve, in a stable order (records list what was advertised).
SHARED_METHODS: Final = (
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
)
MODERN_METHODS: Final = ("server/discover", "subscriptions/listen", *SHARED_METHODS)
LEGACY_METHODS: Final = (
    "initialize",
    "ping",
    "logging/setLevel",
    "resources/subscribe",
    "resources/unsubscribe",
    *SHARED_METHODS,
)
# Methods whose Mcp-Name header mirrors a body field (the tasks extension's carry the task id).
NAME_FIELD_BY_METHOD: Final = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
