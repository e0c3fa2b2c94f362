"""Built-in catalogs: ``probe`` (the default) and ``conformance`` (the official suite's
fixtures). They use only what :mod:`server` exports, like any author's catalog.
"""
