"""What a handler gets: progress, logging, and asking the client for input, in either era.

A handler declares a parameter typed :class:`Context` and uses one API whatever the era:
``ctx.report_progress`` and ``ctx.info`` go out on the request's own stream when it asked for
them; ``ctx.elicit``, ``ctx.sample``, ``ctx.list_roots`` or ``ctx.ask`` ask the client (an
input-required round in the modern era, server-to-client requests in the legacy era: the
:class:`Exchange`'s business), and asking for what the client did not declare raises
:class:`~server.errors.MissingClientCapability`. In a task, questions wait on the task and
progress becomes its status; ``ctx.start_task()`` starts one from a ``defer_task`` handler.
Who is calling: ``ctx.caller`` (:class:`Caller`, None when anonymous), ``ctx.headers`` (never
``Authorization`` or cookies), ``ctx.session_id`` and ``ctx.record_id``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ValidationError

from server.errors import MissingClientCapability
from server.protocol import LOG_LEVEL_RANK

LogLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


class InputRequest:
    """A question for the client; ``key`` names it in the input-required result."""

    method: ClassVar[str]
    capability: ClassVar[dict[str, Any]]

    def __init__(self, key: str | None) -> None:
        self.key = key

    def params(self) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, response: Any) -> Any:
        """Turn the client's answer into the value the handler gets; ValueError if malformed."""
        raise NotImplementedError

    def to_wire(self) -> dict[str, Any]:
        return {"method": self.method, "params": self.params()}


@dataclass(frozen=True, slots=True)
class ElicitResult:
    """The user's answer; ``data`` is ``content`` validated into the pydantic model the
    question was asked with (None unless accepted, or asked with a plain JSON Schema)."""

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None
    data: Any = None


class Elicitation(InputRequest):
    method = "elicitation/create"
    capability: ClassVar[dict[str, Any]] = {"elicitation": {}}

    def __init__(
        self,
        message: str,
        requested_schema: Mapping[str, Any] | type[BaseModel],
        *,
        key: str | None = None,
    ):
        super().__init__(key)
        self.message = message
        # A pydantic model (the SDK idiom) is asked as its JSON Schema and answers with an
        # instance; a Mapping is sent as it is.
        self.model: type[BaseModel] | None = None
        if isinstance(requested_schema, type) and issubclass(requested_schema, BaseModel):
            self.model = requested_schema
            self.requested_schema = requested_schema.model_json_schema()
        elif isinstance(requested_schema, Mapping):
            self.requested_schema = dict(requested_schema)
        else:
            raise TypeError(
                "elicit() takes a JSON Schema (a dict) or a pydantic model class, not "
                f"{requested_schema!r}"
            )

    def params(self) -> dict[str, Any]:
        # "mode" is left out: form is the default in every revision that knows modes, and
        # 2025-06-18 clients do not know the field.
        return {"message": self.message, "requestedSchema": self.requested_schema}

    def parse(self, response: Any) -> ElicitResult:
        if not isinstance(response, dict) or response.get("action") not in (
            "accept",
            "decline",
            "cancel",
        ):
            raise ValueError("an elicitation answer needs action accept, decline or cancel")
        content = response.get("content")
        if content is not None and not isinstance(content, dict):
            raise ValueError("elicitation content must be an object")
        if response["action"] == "accept" and content is None:
            content = {}
        if self.model is None or response["action"] != "accept":
            return ElicitResult(response["action"], content)
        try:
            data = self.model.model_validate(content)
        except ValidationError as wrong:
            raise ValueError(f"the elicitation answer does not fit its schema: {wrong}") from None
        return ElicitResult(response["action"], content, data)


class Sampling(InputRequest):
    method = "sampling/createMessage"
    capability: ClassVar[dict[str, Any]] = {"sampling": {}}

    def __init__(
        self,
        messages: Sequence[Mapping[str, Any]] | str,
        max_tokens: int,
        *,
        system_prompt: str | None = None,
        model_preferences: Mapping[str, Any] | None = None,
        temperature: float | None = None,
        stop_sequences: Sequence[str] | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(key)
        if isinstance(messages, str):
            messages = [{"role": "user", "content": {"type": "text", "text": messages}}]
        self.messages = [dict(message) for message in messages]
        self.max_tokens = max_tokens
        self.extra: dict[str, Any] = {}
        if system_prompt is not None:
            self.extra["systemPrompt"] = system_prompt
        if model_preferences is not None:
            self.extra["modelPreferences"] = dict(model_preferences)
        if temperature is not None:
            self.extra["temperature"] = temperature
        if stop_sequences is not None:
            self.extra["stopSequences"] = list(stop_sequences)

    def params(self) -> dict[str, Any]:
        return {"messages": self.messages, "maxTokens": self.max_tokens, **self.extra}

    def parse(self, response: Any) -> dict[str, Any]:
        if not isinstance(response, dict) or "content" not in response or "role" not in response:
            raise ValueError("a sampling answer needs role and content")
        return response


class Roots(InputRequest):
    method = "roots/list"
    capability: ClassVar[dict[str, Any]] = {"roots": {}}

    def params(self) -> dict[str, Any]:
        return {}

    def parse(self, response: Any) -> list[dict[str, Any]]:
        roots = response.get("roots") if isinstance(response, dict) else None
        if not isinstance(roots, list) or not all(
            isinstance(root, dict) and isinstance(root.get("uri"), str) for root in roots
        ):
            raise ValueError("a roots answer needs a list of roots with uri")
        return roots


class Caller(Protocol):
    """Who is calling, as the server authenticated them (``server.security.auth.Principal``)."""

    @property
    def subject(self) -> str: ...
    @property
    def scopes(self) -> frozenset[str]: ...
    @property
    def claims(self) -> Mapping[str, Any]: ...
    @property
    def tenant(self) -> str | None: ...


class Recorded(Protocol):
    """The request's record (``server.records.draft.Draft``), read only for its request_id."""

    @property
    def request_id(self) -> str: ...


# Credentials stay with the server: a handler never sees them, whatever it logs or forwards.
_HIDDEN_HEADERS = frozenset({b"authorization", b"proxy-authorization", b"cookie"})
_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


def visible_headers(raw: Mapping[bytes, bytes] | None) -> Mapping[str, str]:
    """The request headers a handler may read: text by lower-case name, read-only, credentials
    left out."""
    if not raw:
        return _NO_HEADERS
    return MappingProxyType(
        {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in raw.items()
            if name not in _HIDDEN_HEADERS
        }
    )


class Exchange(Protocol):
    """The era-specific channel a Context talks through."""

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification on the request's own response stream."""

    async def ask(self, requests: dict[str, InputRequest]) -> dict[str, Any]:
        """The client's parsed answers for ``requests`` (by key), or raise to suspend."""

    def close_stream(self) -> None:
        """End the connection carrying the call's stream, if the era can resume it."""


@dataclass
class Context:
    """One request's view of the client and its response stream."""

    exchange: Exchange
    method: str
    request_id: str | int
    era: Literal["modern", "legacy"]
    protocol_version: str
    client_capabilities: Mapping[str, Any]
    client_info: Mapping[str, Any] | None = None
    log_level: str | None = None
    progress_token: str | int | None = None
    # Kept across input-required rounds in the modern era (sealed into requestState), so a
    # handler can avoid redoing work when it is replayed with the client's answers.
    state: dict[str, Any] = field(default_factory=dict)
    # The task this call runs as, once it does (server.tasks sets both).
    task_id: str | None = None
    # What the request did with a task, for its record: {"id", "status"} (the eras set it).
    task_outcome: dict[str, str] | None = None
    task_starter: Callable[[str | None], Awaitable[None]] | None = None
    # The authenticated caller; None when the server runs without authentication.
    caller: Caller | None = None
    # The legacy session the request belongs to (None in the modern era, which has none).
    session_id: str | None = None
    # The key the server's per-client limits (tasks among them) count this caller under: its
    # subject, else its address, as the rate gate keys it; None outside the HTTP endpoint.
    client_key: str | None = None
    # The request's record; :attr:`record_id` formats its request_id only when read.
    record: Recorded | None = field(default=None, repr=False)
    # The raw headers; :attr:`headers` decodes them on first read (most handlers never do).
    raw_headers: Mapping[bytes, bytes] | None = field(default=None, repr=False)
    _headers: Mapping[str, str] | None = field(default=None, repr=False)
    _last_progress: float | None = None
    _asked: int = 0
    _done: bool = False

    @property
    def headers(self) -> Mapping[str, str]:
        """The request's headers by lower-case name, read-only; never ``Authorization``,
        ``Proxy-Authorization`` or ``Cookie``."""
        if self._headers is None:
            self._headers = visible_headers(self.raw_headers)
        return self._headers

    @property
    def record_id(self) -> str | None:
        """The ``request_id`` of this request's record and log lines (None outside a server),
        to tie a handler's own logs to them."""
        return None if self.record is None else self.record.request_id

    def client_supports(self, capability: str) -> bool:
        return capability in self.client_capabilities

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        if self.progress_token is None or self._done:
            return
        # The spec wants progress to increase; a stale value is dropped rather than sent.
        if self._last_progress is not None and progress <= self._last_progress:
            return
        self._last_progress = progress
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.exchange.notify("notifications/progress", params)

    async def log(self, level: LogLevel, data: Any, logger: str | None = None) -> None:
        if self._done or self.log_level is None:
            return
        if LOG_LEVEL_RANK.get(level, 0) < LOG_LEVEL_RANK[self.log_level]:
            return
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        await self.exchange.notify("notifications/message", params)

    async def debug(self, data: Any, logger: str | None = None) -> None:
        await self.log("debug", data, logger)

    async def info(self, data: Any, logger: str | None = None) -> None:
        await self.log("info", data, logger)

    async def warning(self, data: Any, logger: str | None = None) -> None:
        await self.log("warning", data, logger)

    async def error(self, data: Any, logger: str | None = None) -> None:
        await self.log("error", data, logger)

    async def ask(self, *requests: InputRequest) -> tuple[Any, ...]:
        """Ask the client several questions at once; answers come back in the same order."""
        if self._done:
            raise RuntimeError("the request was already answered; nothing more can be asked")
        keyed: dict[str, InputRequest] = {}
        for request in requests:
            missing = {
                name: value
                for name, value in request.capability.items()
                if name not in self.client_capabilities
            }
            if missing:
                raise MissingClientCapability(missing, f"needed for {request.method}")
            self._asked += 1
            key = request.key or f"{request.method.split('/')[0]}-{self._asked}"
            if key in keyed:
                raise ValueError(f"two input requests share the key {key!r}")
            keyed[key] = request
        answers = await self.exchange.ask(keyed)
        return tuple(answers[key] for key in keyed)

    async def elicit(
        self,
        message: str,
        requested_schema: Mapping[str, Any] | type[BaseModel],
        *,
        key: str | None = None,
    ) -> ElicitResult:
        """Ask the user; with a pydantic model, an accepted answer's ``data`` is an instance."""
        (answer,) = await self.ask(Elicitation(message, requested_schema, key=key))
        return answer  # type: ignore[no-any-return]

    async def sample(
        self,
        messages: Sequence[Mapping[str, Any]] | str,
        max_tokens: int,
        *,
        key: str | None = None,
        **options: Any,
    ) -> dict[str, Any]:
        (answer,) = await self.ask(Sampling(messages, max_tokens, key=key, **options))
        return answer  # type: ignore[no-any-return]

    async def list_roots(self, *, key: str | None = None) -> list[dict[str, Any]]:
        (answer,) = await self.ask(Roots(key))
        return answer  # type: ignore[no-any-return]

    async def start_task(self, message: str | None = None) -> None:
        """Go on as a task: the client gets the task handle now and polls for the result.

        For a tool declared with ``defer_task``: what it asked before was answered in the
        request; what it asks from here on waits on the task. A no-op where the call cannot be
        a task (the client did not declare the tasks extension) or already is one."""
        starter, self.task_starter = self.task_starter, None
        if starter is not None:
            await starter(message)

    def close_stream(self) -> None:
        """Close the HTTP connection of this call's SSE stream now; the client reconnects and
        resumes (legacy era, SSE polling). A no-op where streams cannot be resumed."""
        self.exchange.close_stream()

    def finish(self) -> None:
        """Called when the request is answered: nothing may be sent for it afterwards."""
        self._done = True
