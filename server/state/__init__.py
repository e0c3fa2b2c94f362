"""Shared state for several replicas: the interfaces' in-process flavours beside
:mod:`server.state.redis`, the relay of what other replicas announce, and the one place that
picks the flavour from the settings (:mod:`server.state.auto`).

Re-exports only, so ``from server.state import SharedState`` keeps its short path.
"""

from server.state.auto import SharedState, shared_state

__all__ = ["SharedState", "shared_state"]
