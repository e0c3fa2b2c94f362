"""The Redis flavour of shared state: one connection with its health (``link``), the session
store, the bus between replicas and the stream mirror. Only this folder (and the Redis record
sink and report reader) imports ``redis``, so the package stays an optional extra.
"""
