"""The 2026-07-28 era, sans-IO: per-request ``_meta`` and header rules, ``server/discover``,
the result envelope, and input-required rounds replayed with sealed state. No HTTP here: the
shell is :mod:`server.transport.modern`.
"""
