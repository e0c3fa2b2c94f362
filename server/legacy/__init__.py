"""The ``initialize`` era (2025-11-25 and older), sans-IO: version negotiation, sessions and
their store, a session's live part in this process, resumable event streams, and calls that
outlive their request. No HTTP here: the shell is :mod:`server.transport.legacy`.
"""
