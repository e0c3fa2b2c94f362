"""Protocol constants shared by both eras: versions, ``_meta`` keys, the methods, log levels.

Pure data, so every layer can name the protocol the same way without importing each other.
:data:`JSONObject` names the shape most messages and params have, for new signatures to use.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class Method:
    """One JSON-RPC request method, everything the server says of it in one row of
    :data:`METHODS` (its handler lives in :mod:`server.dispatch` or in the era that serves it;
    ``tests/test_protocol.py`` checks that the handlers and the rows agree both ways)."""

    name: str
    eras: frozenset[str]  # "modern", "legacy"
    # The catalog capability that makes a shared method routable (Dispatcher.serves).
    capability: str | None = None
    # The body field the modern era's Mcp-Name header mirrors.
    name_field: str | None = None
    # A 2026-07-28 result that is cacheable, so MUST carry ttlMs and cacheScope.
    cacheable: bool = False
    # May answer with an input-required result (MRTR).
    input_required: bool = False
    # What a call names, for its record's target and outcome (docs/records.md).
    kind: str | None = None
    # Served only while this extension is (the tasks extension's methods).
    extension: str | None = None


# The method most paths ask for by name (a tool call: its tool, task, span and metric).
TOOLS_CALL: Final = "tools/call"

BOTH: Final = frozenset({"modern", "legacy"})
MODERN: Final = frozenset({"modern"})
LEGACY: Final = frozenset({"legacy"})

# Every request method, in the order records list what was advertised (an era's own methods
# first). Adding a method: a row here and its handler (docs/architecture.md, "Where to add").
METHODS: Final = (
    Method("server/discover", MODERN, cacheable=True),
    Method("subscriptions/listen", MODERN),
    Method("initialize", LEGACY),
    Method("ping", LEGACY),
    Method("logging/setLevel", LEGACY),
    Method("resources/subscribe", LEGACY),
    Method("resources/unsubscribe", LEGACY),
    Method("tools/list", BOTH, "tools", cacheable=True),
    Method(TOOLS_CALL, BOTH, "tools", "name", input_required=True, kind="tool"),
    Method("prompts/list", BOTH, "prompts", cacheable=True),
    Method("prompts/get", BOTH, "prompts", "name", input_required=True, kind="prompt"),
    Method("resources/list", BOTH, "resources", cacheable=True),
    Method("resources/templates/list", BOTH, "resources", cacheable=True),
    Method(
        "resources/read",
        BOTH,
        "resources",
        "uri",
        cacheable=True,
        input_required=True,
        kind="resource",
    ),
    Method("completion/complete", BOTH, "completions"),
    Method("tasks/get", BOTH, name_field="taskId", extension="tasks"),
    Method("tasks/update", MODERN, name_field="taskId", extension="tasks"),
    Method("tasks/result", LEGACY, extension="tasks"),
    Method("tasks/list", LEGACY, extension="tasks"),
    Method("tasks/cancel", BOTH, name_field="taskId", extension="tasks"),
)
# The notifications a client sends (each era answers them without a result).
CLIENT_NOTIFICATIONS: Final = (
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
)

# -- what the rest of the server reads, derived from METHODS --------------------------------

METHOD_NAMES: Final = frozenset(method.name for method in METHODS)
# Which capability makes each shared method routable.
METHOD_CAPABILITY: Final = {m.name: m.capability for m in METHODS if m.capability is not None}
CACHEABLE_METHODS: Final = frozenset(m.name for m in METHODS if m.cacheable)
# The only methods that may answer with an input-required result (MRTR).
INPUT_REQUIRED_METHODS: Final = frozenset(m.name for m in METHODS if m.input_required)
# Requests whose records say what the call named (target) and came to (outcome), by kind.
CALL_KIND_BY_METHOD: Final = {m.name: m.kind for m in METHODS if m.kind is not None}
CALL_METHODS: Final = frozenset(CALL_KIND_BY_METHOD)
# Methods whose Mcp-Name header mirrors a body field (the tasks extension's carry the task id).
NAME_FIELD_BY_METHOD: Final = {m.name: m.name_field for m in METHODS if m.name_field is not None}
# Every method either era may serve, in a stable order (records list what was advertised).
SHARED_METHODS: Final = tuple(m.name for m in METHODS if m.eras == BOTH and m.extension is None)
MODERN_METHODS: Final = tuple(m.name for m in METHODS if "modern" in m.eras and m.extension is None)
LEGACY_METHODS: Final = tuple(m.name for m in METHODS if "legacy" in m.eras and m.extension is None)
MODERN_ONLY_METHODS: Final = frozenset(
    m.name for m in METHODS if m.eras == MODERN and m.extension is None
)
# The tasks extension's methods in each era, in the order they are advertised.
MODERN_TASK_METHODS: Final = tuple(
    m.name for m in METHODS if "modern" in m.eras and m.extension == "tasks"
)
LEGACY_TASK_METHODS: Final = tuple(
    m.name for m in METHODS if "legacy" in m.eras and m.extension == "tasks"
)
