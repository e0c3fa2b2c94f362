"""Built-in catalogs: ``probe`` (the default) and ``conformance`` (the official suite's fixtures).

May import: catalog, content, context, errors, pydantic.
"""
