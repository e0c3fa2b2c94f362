"""``python -m server token``: a new random bearer token, and the digest line for
``MCP_AUTH_TOKENS``."""

from __future__ import annotations


def run() -> int:
    from server.security.auth import new_token

    secret, digest = new_token()
    print("# The token: clients send it as 'Authorization: Bearer <token>'. Keep it secret.")
    print(secret)
    print("# Its digest, for MCP_AUTH_TOKENS (comma-separate several):")
    print(digest)
    return 0
