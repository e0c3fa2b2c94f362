"""The HTTP shell, the only ASGI code besides wiring and serving: the endpoint (admission,
body, era choice), each era's HTTP half (JSON or SSE answers, listen and GET streams), SSE
framing, and the Host/Origin/Accept/Content-Type guards.
"""
