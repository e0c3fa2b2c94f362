# syntax=docker/dockerfile:1
# The MCP server as a container: a wheel built in one stage, installed into a slim runtime.
# Configure it only with MCP_* environment variables (see .env.example).
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
WORKDIR /src
RUN python3 -m venv /opt/build && /opt/build/bin/pip install --no-cache-dir build==1.2.2.post1
COPY pyproject.toml README.md ./
COPY server ./server
RUN /opt/build/bin/python -m build --wheel --outdir /dist

FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    MCP_HOST=0.0.0.0 \
    MCP_PORT=8000
COPY --from=build /dist /tmp/dist
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir /tmp/dist/*.whl \
    && rm -rf /tmp/dist \
    && useradd --system --uid 10001 --no-create-home mcp
USER 10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=5s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen(f\"http://127.0.0.1:{os.environ.get('MCP_PORT', '8000')}/healthz\", timeout=2)"]
CMD ["python3", "-m", "server"]
