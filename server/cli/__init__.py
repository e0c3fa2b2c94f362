"""The command line: ``python -m server`` and the ``mcp-http-server`` script
(:mod:`server.cli.main`), a module per command (``serve``, ``token``, ``call``, ``report``).
"""
