"""Test a catalog in memory: :class:`Client` (:mod:`server.testing.client`) drives the real app
with no sockets, in either era, and raises what :mod:`server.testing.errors` holds.

Re-exports only, so ``from server.testing import Client`` keeps its short path. Not imported by
``import server`` (it loads the web stack).
"""

from server.testing.client import Client
from server.testing.errors import MAX_ROUNDS, ClientError, ErrorAnswer, TooManyQuestions

__all__ = ["MAX_ROUNDS", "Client", "ClientError", "ErrorAnswer", "TooManyQuestions"]
