"""Content helpers for tool results, prompt messages and resource contents.

Small frozen dataclasses a server author returns from handlers (``Text("hi")``,
``Image(png_bytes, "image/png")``, ...). Each knows its wire shape (``to_wire``); binary data
is accepted as bytes and base64-encoded once, at construction time.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["user", "assistant"]
Wire = dict[str, Any]


def _b64(data: bytes | str) -> str:
    return data if isinstance(data, str) else base64.b64encode(data).decode("ascii")


def _extras(
    wire: Wire, annotations: Mapping[str, Any] | None, meta: Mapping[str, Any] | None
) -> Wire:
    if annotations:
        wire["annotations"] = dict(annotations)
    if meta:
        wire["_meta"] = dict(meta)
    return wire


@dataclass(frozen=True, slots=True)
class Icon:
    src: str
    mime_type: str | None = None
    sizes: Sequence[str] | None = None
    theme: Literal["light", "dark"] | None = None

    def to_wire(self) -> Wire:
        wire: Wire = {"src": self.src}
        if self.mime_type:
            wire["mimeType"] = self.mime_type
        if self.sizes:
            wire["sizes"] = list(self.sizes)
        if self.theme:
            wire["theme"] = self.theme
        return wire


@dataclass(frozen=True, slots=True)
class Text:
    text: str
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> Wire:
        return _extras({"type": "text", "text": self.text}, self.annotations, self.meta)


@dataclass(frozen=True, slots=True)
class Image:
    """An image; ``data`` is raw bytes or an already base64-encoded string."""

    data: bytes | str
    mime_type: str
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> Wire:
        wire = {"type": "image", "data": _b64(self.data), "mimeType": self.mime_type}
        return _extras(wire, self.annotations, self.meta)


@dataclass(frozen=True, slots=True)
class Audio:
    """Audio; ``data`` is raw bytes or an already base64-encoded string."""

    data: bytes | str
    mime_type: str
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> Wire:
        wire = {"type": "audio", "data": _b64(self.data), "mimeType": self.mime_type}
        return _extras(wire, self.annotations, self.meta)


@dataclass(frozen=True, slots=True)
class TextContents:
    """The contents of a text resource (``resources/read``, embedded resources)."""

    uri: str
    text: str
    mime_type: str | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> Wire:
        wire: Wire = {"uri": self.uri, "text": self.text}
        if self.mime_type:
            wire["mimeType"] = self.mime_type
        return _extras(wire, None, self.meta)


@dataclass(frozen=True, slots=True)
class BlobContents:
    """The contents of a binary resource; ``blob`` is raw bytes or base64 text."""

    uri: str
    blob: bytes | str
    mime_type: str | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> Wire:
        wire: Wire = {"uri": self.uri, "blob": _b64(self.blob)}
        if self.mime_type:
            wire["mimeType"] = self.mime_type
        return _extras(wire, None, self.meta)


ResourceContents = TextContents | BlobContents


@dataclass(frozen=True, slots=True)
class EmbeddedResource:
    resource: ResourceContents
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> Wire:
        wire = {"type": "resource", "resource": self.resource.to_wire()}
        return _extras(wire, self.annotations, self.meta)


@dataclass(frozen=True, slots=True)
class ResourceLink:
    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> Wire:
        wire: Wire = {"type": "resource_link", "uri": self.uri, "name": self.name}
        for key, value in (
            ("title", self.title),
            ("description", self.description),
            ("mimeType", self.mime_type),
            ("size", self.size),
        ):
            if value is not None:
                wire[key] = value
        return _extras(wire, self.annotations, self.meta)


ContentBlock = Text | Image | Audio | EmbeddedResource | ResourceLink
CONTENT_TYPES = (Text, Image, Audio, EmbeddedResource, ResourceLink)


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A complete tool result, for handlers that want full control of the answer."""

    content: Sequence[ContentBlock] = ()
    structured: Any = None
    is_error: bool = False
    meta: Mapping[str, Any] | None = None

    def to_wire(self) -> Wire:
        wire: Wire = {"content": [block.to_wire() for block in self.content]}
        if self.structured is not None:
            wire["structuredContent"] = self.structured
        if self.is_error:
            wire["isError"] = True
        return _extras(wire, None, self.meta)


@dataclass(frozen=True, slots=True)
class PromptMessage:
    role: Role
    content: ContentBlock

    def to_wire(self) -> Wire:
        return {"role": self.role, "content": self.content.to_wire()}


@dataclass(frozen=True, slots=True)
class Completion:
    """Completion values; at most 100 are sent, ``total`` and ``has_more`` tell the rest."""

    values: Sequence[str]
    total: int | None = None
    has_more: bool | None = None

    def to_wire(self) -> Wire:
        values = list(self.values)[:100]
        wire: Wire = {"values": values}
        total = (
            self.total
            if self.total is not None
            else (len(self.values) if len(self.values) > 100 else None)
        )
        if total is not None:
            wire["total"] = total
        has_more = self.has_more if self.has_more is not None else (len(self.values) > 100 or None)
        if has_more is not None:
            wire["hasMore"] = has_more
        return wire


def user(content: ContentBlock | str) -> PromptMessage:
    return PromptMessage("user", Text(content) if isinstance(content, str) else content)


def assistant(content: ContentBlock | str) -> PromptMessage:
    return PromptMessage("assistant", Text(content) if isinstance(content, str) else content)
