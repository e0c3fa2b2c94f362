"""Who may use the endpoint and how much: bearer authentication (static tokens, JWT), the
protected-resource metadata, per-client limits (rates, stream and session slots), and the
:class:`~server.security.gate.Gate` that applies them to every request.
"""
