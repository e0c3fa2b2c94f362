# syntax=docker/dockerfile:1
# The MCP server as a container: a wheel built in one stage, installed into a slim runtime.
# Configure it only with MCP_* environment variables (see .env.example); nothing else is read.
# Forwarded headers are believed only from MCP_TRUSTED_PROXIES, which the image leaves empty:
# set it where the proxy's address is known (deploy/compose.yaml, deploy/k8s/).
#
# BASE is any Debian-like image with python3 (3.11+) and its venv module on PATH; every step
# calls python3 and pip from PATH, never /usr/local/bin/..., so a stand-in base works too
# (deploy/image-smoke.sh builds on one made with debootstrap).
ARG BASE=python:3.11-slim

# The redis extra (shared state for replicas, MCP_REDIS_URL) is built beside the wheel, at the
# version pyproject.toml asks for, and installed with it.
FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY server ./server
RUN python3 -m venv /opt/build \
    && /opt/build/bin/python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist . \
    && /opt/build/bin/python -m pip wheel --no-cache-dir --no-deps --wheel-dir /dist/extras \
        "$(/opt/build/bin/python -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["redis"][0])')"

FROM ${BASE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    MCP_HOST=0.0.0.0 \
    MCP_PORT=8000
# /app is the working directory; records/ (MCP_RECORDS_FILE's default folder) is the only
# place the server writes, so the root filesystem can be mounted read-only around it.
WORKDIR /app
COPY --from=build /dist /tmp/dist
RUN python3 -m venv /opt/venv \
    && pip install --no-cache-dir /tmp/dist/*.whl /tmp/dist/extras/*.whl \
    && rm -rf /tmp/dist \
    && groupadd --system --gid 10001 mcp \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --no-create-home \
        --shell /usr/sbin/nologin mcp \
    && mkdir -p /app/records \
    && chown 10001:10001 /app/records
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('MCP_PORT', '8000') + '/healthz', timeout=2)"]
CMD ["python3", "-m", "server"]
