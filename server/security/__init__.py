"""Who may use the endpoint and how much: bearer authentication (static tokens, JWT), the
protected-resource metadata, per-client limits (rates, stream and session slots), the client's
address behind trusted proxies, and the :class:`~server.security.gate.Gate` that applies them
to every request (and, alone in this folder, reads the settings that choose them).
"""
