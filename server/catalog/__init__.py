"""The declaration API: a :class:`Catalog` (:mod:`server.catalog.catalog`) and what it holds, a
module per kind of thing an author declares (tools, resources, prompts, completions,
extensions, skills).

Re-exports only, so ``from server.catalog import Catalog`` keeps its short path.
"""

from server.catalog.catalog import Catalog, Change, ChangeKind, Listener, Snapshot

__all__ = ["Catalog", "Change", "ChangeKind", "Listener", "Snapshot"]
