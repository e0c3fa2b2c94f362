"""The privacy rules of request records: what a record may say of a request's parameters and of
its client's declared capabilities.

Parameters are redacted at any depth (keys matching the redaction list), capped in size, or
dropped; the ``Authorization`` header and tokens are never read into a record at all (nothing
here sees them). The record writer applies the rules, off the request path: to a built record
with :meth:`Privacy.apply`, or while encoding a finished draft's line
(:class:`server.records.lines.LineWriter`), which gives the same bytes.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any

import orjson

from server.memo import SMALL_KEY_BYTES, BoundedMemo

REDACTED = "[redacted]"
HARMLESS_KEYS = 4096  # verdicts remembered (keys are judged again past that)


@dataclass(frozen=True, slots=True)
class Privacy:
    """What parameters may say: a redaction list (substrings of keys), a size cap, or nothing."""

    redact: tuple[str, ...]
    max_params_bytes: int
    keep_params: bool = True
    # Verdicts per key already seen (params repeat the same few keys): small keys only, a
    # bounded number of them (a client may send keys of any size).
    _verdicts: BoundedMemo[Any, bool] = field(
        default_factory=lambda: BoundedMemo(HARMLESS_KEYS),
        init=False,
        repr=False,
        compare=False,
    )
    # The small keys judged harmless, as a set (known_harmless tests keys against it).
    _harmless: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The words are matched in the keys' normal form, so they are put in it too
        # ("api_key" in the setting matches what "apikey" does).
        words = tuple(word for word in map(normal_key, self.redact) if word)
        object.__setattr__(self, "redact", words)

    def apply(self, record: dict[str, Any]) -> None:
        """Make a record's params fit to keep (the record writer calls this, off the request
        path)."""
        # Params and capabilities are parts of the body: a body within the cap needs no
        # measuring, and values with no sensitive key anywhere need no redacted copy.
        small = record.get("bytes_in", self.max_params_bytes + 1) <= self.max_params_bytes
        client = record.get("client")
        capabilities = client.get("capabilities") if isinstance(client, dict) else None
        harmless = (
            small
            and not self.has_sensitive_key(record.get("params"))
            # Legacy records carry the capabilities of the session's initialize, not of this
            # body: they are checked on their own, sensitive keys and size.
            and not self.has_sensitive_key(capabilities)
            and self.fits(capabilities)
        )
        if "params" in record:
            if harmless and self.keep_params:
                params = record["params"]
                if isinstance(params, dict) and "_meta" in params:
                    params = {key: value for key, value in params.items() if key != "_meta"}
                record["params"] = params
            else:
                record["params"] = self.clean(record["params"], measured=small)
        # Declared capabilities are client-sent too: same redaction and size cap (keeping them
        # even when params are dropped, since the report needs them).
        if not harmless and capabilities is not None:
            assert isinstance(client, dict)
            client["capabilities"] = self.clean_capabilities(capabilities)

    def fits(self, value: Any) -> bool:
        """Whether ``value`` encodes within the size cap (None does; what does not encode
        does not)."""
        if value is None:
            return True
        try:
            return len(orjson.dumps(value)) <= self.max_params_bytes
        except orjson.JSONEncodeError:
            return False

    def clean_capabilities(self, capabilities: Any) -> Any:
        """Declared capabilities, redacted and capped like params, but never dropped."""
        keeping = self if self.keep_params else Privacy(self.redact, self.max_params_bytes)
        return keeping.clean(capabilities)

    def known_harmless(self, value: dict[str, Any]) -> bool:
        """True when no key of ``value`` is sensitive, seen without a walk: ``value`` is a dict
        of values and dicts of values (no list, nothing deeper: a tool call's name and flat
        arguments) whose keys were all judged harmless before. False says nothing (then
        :meth:`has_sensitive_key` decides). Set lookups and type tests only, no call: the
        record writer asks this for every request's params."""
        harmless = self._harmless
        for key in value:  # noqa: PLC0206 - no items() call, no tuple per key
            if key not in harmless:
                return False
            kind = type(value[key])
            if kind is dict:
                inner = value[key]
                for name in inner:
                    if name not in harmless:
                        return False
                    kind = type(inner[name])
                    if kind is dict or kind is list:
                        return False
            elif kind is list:
                return False
        return True

    def has_sensitive_key(self, value: Any, depth: int = 0) -> bool:
        """Whether a key matching the redaction list appears at any depth (past 32 levels:
        assumed so, and the careful path takes over)."""
        if depth > 32:
            return True
        kind = type(value)
        if kind is dict:
            verdicts = self._verdicts
            for key, item in value.items():
                verdict = verdicts.get(key)
                if verdict is None:
                    verdict = self._judge(key)
                if verdict:
                    return True
                if (type(item) is dict or type(item) is list) and self.has_sensitive_key(
                    item, depth + 1
                ):
                    return True
        elif kind is list:
            for item in value:
                if (type(item) is dict or type(item) is list) and self.has_sensitive_key(
                    item, depth + 1
                ):
                    return True
        return False

    def clean(self, params: Any, *, measured: bool = False) -> Any:
        """``measured``: the caller knows the params fit the cap, so they are not encoded.

        ``_meta`` is left out: what it says (version, client, capabilities) has its own fields
        in the record, and the rest of it (progress tokens) is noise."""
        if not self.keep_params:
            return None
        if isinstance(params, dict) and "_meta" in params:
            params = {key: value for key, value in params.items() if key != "_meta"}
        cleaned = self._redact(params, depth=0)
        if measured:
            return cleaned
        encoded = orjson.dumps(cleaned)
        if len(encoded) <= self.max_params_bytes:
            return cleaned
        return {"_truncated": True, "bytes": len(encoded)}

    def _redact(self, value: Any, depth: int) -> Any:
        if depth > 32:
            return "[too deep]"
        if isinstance(value, dict):
            return {
                key: REDACTED if self.sensitive(key) else self._redact(item, depth + 1)
                for key, item in value.items()
            }
        if isinstance(value, list):
            return [self._redact(item, depth + 1) for item in value]
        return value

    def sensitive(self, key: Any) -> bool:
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._judge(key)
        return verdict

    def _judge(self, key: Any) -> bool:
        """A key's verdict, remembered (a harmless one in ``_harmless`` too, bounded alike)."""
        verdict = _sensitive(str(key), self.redact)
        self._verdicts.remember(key, verdict)
        if not verdict and type(key) is str and len(key) <= SMALL_KEY_BYTES:
            harmless = self._harmless
            if len(harmless) >= HARMLESS_KEYS:
                harmless.clear()
            harmless.add(key)
        return verdict


def normal_key(key: str) -> str:
    """A key as the redaction list is matched against it: compatibility-normalised (a
    full-width ``API_KEY`` is ``API_KEY``), case-folded, and letters and digits only, so
    ``api.key``, ``API Key``, ``api-key``, ``api_key``, ``apiKey`` and ``api\u200bkey`` are
    all ``apikey``: a client chooses its keys' spelling, and a secret under any of them is
    still a secret."""
    folded = unicodedata.normalize("NFKC", key).casefold()
    return "".join(char for char in folded if char.isalnum())


def _sensitive(key: str, redact: tuple[str, ...]) -> bool:
    normal = normal_key(key)
    return any(word in normal for word in redact)
