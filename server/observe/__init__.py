"""What the server tells about itself beyond its records: Prometheus metrics (:mod:`.metrics`).

An observer of the records and of the state other parts already hold; nothing on the request
path calls into it but the recorder's hand-over.
"""
