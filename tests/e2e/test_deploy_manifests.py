"""deploy/: the compose file and the Kubernetes manifests parse, and point at real things.

Every port, path, probe and ``MCP_*`` name in them is checked against the server itself: the
settings are built from the environment each manifest gives (over the image's ``ENV``: the
server's, then the user-catalog recipe's, deploy/catalog/Dockerfile, which both run), the
probe paths are requested from the app (``create_app`` serving the example catalog the recipe
builds in, started through its lifespan, over httpx's ASGI transport), and the nginx upstream
and prefix are compared with the replicas.
"""

from __future__ import annotations

import inspect
import os
import posixpath
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest
import uvicorn
import yaml
from dockerfile_parse import DockerfileParser

from server.app import Application, create_app
from server.serving.server import uvicorn_options
from server.settings import Settings
from server.settings_checks import PLACEHOLDER_SECRET_PREFIX
from tests.support.deploy_helpers import ROOT
from tests.support.polling import wait_until
from tests.support.redis_server import RedisServer

DEPLOY = ROOT / "deploy"
RECIPE = DEPLOY / "catalog" / "Dockerfile"
EXAMPLE = DEPLOY / "catalog" / "example"
COMPOSE = DEPLOY / "compose.yaml"
K8S = DEPLOY / "k8s"
NGINX = DEPLOY / "nginx" / "mcp.conf"
FIELDS = {f"MCP_{name.upper()}" for name in Settings.model_fields}
REPLICAS = ("mcp-a", "mcp-b")


# -- loading ------------------------------------------------------------------------------------


def image_env() -> dict[str, str]:
    """The MCP_* ENV of the image the manifests run: the server's, then the recipe's on top."""
    envs = DockerfileParser(path=str(ROOT / "Dockerfile")).envs
    envs.update(DockerfileParser(path=str(RECIPE)).envs)
    return {name: value for name, value in envs.items() if name.startswith("MCP_")}


def image_uid() -> int:
    users = [i["value"] for i in DockerfileParser(path=str(ROOT / "Dockerfile")).structure
             if i["instruction"] == "USER"]  # fmt: skip
    return int(users[-1].split(":")[0])


def settings_from(env: dict[str, str]) -> Settings:
    """Settings exactly as the server would read them from this environment (no .env)."""
    outside = {name: value for name, value in os.environ.items() if not name.startswith("MCP_")}
    with mock.patch.dict(os.environ, {**outside, **env}, clear=True):
        return Settings(_env_file=None)


# What an operator puts in place of the examples' placeholder secret (which is refused).
FILLED_IN_SECRET = "9f0c2d4e6a8b1c3d5e7f9a0b2c4d6e8f"


def filled_in(env: dict[str, str]) -> dict[str, str]:
    """The examples as their instructions say to use them: the placeholder secret replaced."""
    return {
        name: FILLED_IN_SECRET if value.startswith(PLACEHOLDER_SECRET_PREFIX) else value
        for name, value in env.items()
    }


def read_env_file(path: Path, *, as_shipped: bool = False) -> dict[str, str]:
    pairs = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            pairs[name.strip()] = value.strip()
    return pairs if as_shipped else filled_in(pairs)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def load_k8s() -> dict[str, dict[str, Any]]:
    """The server's own Kubernetes objects in deploy/k8s, by kind (not Redis's, nor the
    kustomization; tests/e2e/test_deploy_cluster.py checks those)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document["kind"] == "Kustomization":
                continue
            if document["metadata"]["labels"]["app.kubernetes.io/name"] != "mcp-http-server":
                continue
            assert document["kind"] not in found, f"two {document['kind']}s"
            found[document["kind"]] = document
    return found


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict[str, Any]]:
    return load_k8s()


def compose_env(compose: dict[str, Any], service: str) -> dict[str, str]:
    """The environment of a compose service: image ENV, env_file (its .example), environment."""
    spec = compose["services"][service]
    env = image_env()
    for entry in spec.get("env_file", []):
        path = entry if isinstance(entry, str) else entry["path"]
        env.update(read_env_file(DEPLOY / f"{path}.example"))
    environment = spec.get("environment", {})
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    env.update({name: str(value) for name, value in environment.items()})
    return env


def container(k8s: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (only,) = k8s["Deployment"]["spec"]["template"]["spec"]["containers"]
    return only


def k8s_env(k8s: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The container's environment: image ENV, envFrom (ConfigMap, Secret), then env."""
    spec = container(k8s)
    env = image_env()
    for source in spec.get("envFrom", []):
        if "configMapRef" in source:
            assert source["configMapRef"]["name"] == k8s["ConfigMap"]["metadata"]["name"]
            env.update(k8s["ConfigMap"]["data"])
        if "secretRef" in source:
            assert source["secretRef"]["name"] == k8s["Secret"]["metadata"]["name"]
            env.update(k8s["Secret"]["stringData"])
    for item in spec.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            assert ref["name"] == k8s["Secret"]["metadata"]["name"]
            env[item["name"]] = k8s["Secret"]["stringData"][ref["key"]]
    return filled_in(env)


# -- nginx config -------------------------------------------------------------------------------


def nginx_text() -> str:
    return "\n".join(line.split("#", 1)[0] for line in NGINX.read_text().splitlines())


def nginx_upstreams() -> list[tuple[str, int]]:
    block = re.search(r"upstream\s+mcp_app\s*\{(.*?)\}", nginx_text(), re.S)
    assert block is not None
    servers = re.findall(r"^\s*server\s+([^\s:;]+):(\d+)", block.group(1), re.M)
    return [(host, int(port)) for host, port in servers]


def nginx_upstream_block() -> str:
    block = re.search(r"upstream\s+mcp_app\s*\{(.*?)\}", nginx_text(), re.S)
    assert block is not None
    return block.group(1)


def server_keepalive_s(settings: Settings) -> float:
    """How long the server keeps an idle connection open: uvicorn's ``timeout_keep_alive`` as
    the server configures it (its default when the server sets none)."""
    default = inspect.signature(uvicorn.Config).parameters["timeout_keep_alive"].default
    return float(uvicorn_options(settings).get("timeout_keep_alive", default))


def nginx_directive(name: str, text: str | None = None) -> list[str]:
    return re.findall(rf"(?m)^\s*{name}\s+([^;]+);", text if text is not None else nginx_text())


def nginx_location(prefix: str) -> str:
    match = re.search(rf"location\s+{re.escape(prefix)}\s*\{{(.*?)\n    \}}", nginx_text(), re.S)
    assert match is not None, f"no location {prefix}"
    return match.group(1)


def seconds(value: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(ms|s|m|h)?", value.strip()).groups()  # type: ignore[union-attr]
    return int(number) * {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600}[unit]


def size_bytes(value: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kKmMgG])?", value.strip()).groups()  # type: ignore[union-attr]
    return int(number) * {None: 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit and unit.lower()]


# -- the app, to ask what it serves ------------------------------------------------------------


def local_redis(env: dict[str, str], redis_server: RedisServer) -> dict[str, str]:
    """The manifest's environment with its Redis (a Service name) swapped for the test's."""
    assert env["MCP_REDIS_URL"].startswith("redis://")
    return {**env, "MCP_REDIS_URL": redis_server.url}


@pytest.fixture
def example_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example catalog importable, as the recipe's PYTHONPATH makes it in the image."""
    monkeypatch.syspath_prepend(str(EXAMPLE))


@pytest.fixture
async def started_app(
    tmp_path: Path, redis_server: RedisServer, example_on_path: None
) -> AsyncIterator[Application]:
    env = {
        **local_redis(k8s_env(load_k8s()), redis_server),
        "MCP_RECORDS_FILE": str(tmp_path / "records.jsonl"),
    }
    app = create_app(settings_from(env))
    async with app.lifespan(app.starlette):
        await wait_until(lambda: app.shared.healthy)  # its first PING answered
        yield app


def probe_paths(compose: dict[str, Any], k8s: dict[str, dict[str, Any]]) -> Iterator[str]:
    spec = container(k8s)
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        if probe in spec:
            yield spec[probe]["httpGet"]["path"]
    for service in REPLICAS:
        test = compose["services"][service].get("healthcheck", {}).get("test")
        if test:  # (none: the image's HEALTHCHECK, checked in test_dockerfile.py)
            yield from re.findall(r"/\w+", " ".join(test))
    # nginx's own health location proxies to this path of the app.
    yield from re.findall(r"http://mcp_app(/\w+)", nginx_location("= /healthz"))


# -- parsing -----------------------------------------------------------------------------------


def test_compose_parses_with_nginx_two_replicas_and_redis(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {*REPLICAS, "nginx", "redis"}
    for name in REPLICAS:
        build = services[name]["build"]
        # The recipe, on the example folder, on the server's image (docker build -t ... .).
        context = DEPLOY / build["context"]
        assert context.resolve() == EXAMPLE.resolve()
        assert (context / build["dockerfile"]).resolve() == RECIPE.resolve()
        assert build["args"]["SERVER_IMAGE"] == "mcp-http-server:latest"
        assert build["args"]["CATALOG"] == DockerfileParser(path=str(RECIPE)).envs["MCP_CATALOG"]
        assert services[name]["image"] == services[REPLICAS[0]]["image"]
    depends = services["nginx"]["depends_on"]
    assert {name: depends[name]["condition"] for name in REPLICAS} == dict.fromkeys(
        REPLICAS, "service_healthy"
    )
    assert services["redis"]["image"].startswith("redis:")


def test_k8s_manifests_parse(k8s: dict[str, dict[str, Any]]) -> None:
    assert set(k8s) == {
        "Deployment",
        "Service",
        "ConfigMap",
        "Secret",
        "Ingress",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
    }
    for obj in k8s.values():
        assert obj["metadata"]["name"] == "mcp-http-server"
    deployment = k8s["Deployment"]["spec"]
    labels = deployment["template"]["metadata"]["labels"]
    assert deployment["selector"]["matchLabels"].items() <= labels.items()
    assert k8s["Service"]["spec"]["selector"].items() <= labels.items()


# -- names -------------------------------------------------------------------------------------


def test_every_env_name_in_compose_is_a_setting(compose: dict[str, Any]) -> None:
    for service in REPLICAS:
        env = compose_env(compose, service)
        assert set(env) <= FIELDS, set(env) - FIELDS
        settings_from(env)  # and every value validates
    for service in ("nginx", "redis"):
        assert not compose["services"][service].get("environment")


def test_every_env_name_in_k8s_is_a_setting(k8s: dict[str, dict[str, Any]]) -> None:
    assert set(k8s["ConfigMap"]["data"]) <= FIELDS
    assert set(k8s["Secret"]["stringData"]) <= FIELDS
    assert {item["name"] for item in container(k8s).get("env", [])} <= FIELDS
    env = k8s_env(k8s)
    assert set(env) <= FIELDS
    settings_from(env)


def test_the_examples_secret_as_shipped_is_refused(k8s: dict[str, dict[str, Any]]) -> None:
    # Copied without filling in, the examples would sign with a key anyone can read here.
    shipped = [
        read_env_file(DEPLOY / "mcp.env.example", as_shipped=True),
        k8s["Secret"]["stringData"],
    ]
    for env in shipped:
        assert env["MCP_STATE_SECRET"].startswith(PLACEHOLDER_SECRET_PREFIX)
        with pytest.raises(ValueError, match="placeholder from the examples"):
            settings_from({"MCP_STATE_SECRET": env["MCP_STATE_SECRET"]})


def test_replicas_share_the_state_secret_from_an_env_file(compose: dict[str, Any]) -> None:
    files = {tuple(compose["services"][name]["env_file"]) for name in REPLICAS}
    assert len(files) == 1, "both replicas read the same env file"
    for name in REPLICAS:
        assert "MCP_STATE_SECRET" not in compose["services"][name].get("environment", {})
        secret = settings_from(compose_env(compose, name)).state_secret.get_secret_value()
        assert len(secret) >= 16
    (path,) = files.pop()
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert f"deploy/{path}" in ignored, "the real env file (a secret) is never committed"


# -- ports -------------------------------------------------------------------------------------


def test_nginx_upstream_points_at_the_replicas_port(compose: dict[str, Any]) -> None:
    upstreams = nginx_upstreams()
    assert sorted(host for host, _ in upstreams) == sorted(REPLICAS)
    for host, port in upstreams:
        assert port == settings_from(compose_env(compose, host)).port
    exposed = DockerfileParser(path=str(ROOT / "Dockerfile")).structure
    (expose,) = [item["value"] for item in exposed if item["instruction"] == "EXPOSE"]
    assert {port for _, port in upstreams} == {int(expose)}


def test_nginx_publishes_the_port_it_listens_on(compose: dict[str, Any]) -> None:
    (listen,) = nginx_directive("listen")
    (published,) = compose["services"]["nginx"]["ports"]
    host_ip, _host_port, container_port = str(published).split(":")
    assert host_ip == "127.0.0.1"
    assert int(container_port) == int(listen.split()[0].rsplit(":", 1)[-1])
    for name in REPLICAS:
        assert "ports" not in compose["services"][name], "only the proxy is reachable"


def test_k8s_container_port_is_the_servers_port(k8s: dict[str, dict[str, Any]]) -> None:
    spec = container(k8s)
    ports = {port["name"]: port["containerPort"] for port in spec["ports"]}
    assert list(ports.values()) == [settings_from(k8s_env(k8s)).port]
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        target = spec[probe]["httpGet"]["port"]
        assert target in ports or target in ports.values(), (probe, target)
    for port in k8s["Service"]["spec"]["ports"]:
        assert port["targetPort"] in ports or port["targetPort"] in ports.values()


# -- paths and probes ----------------------------------------------------------------------------


def test_k8s_probes_are_readyz_and_healthz(k8s: dict[str, dict[str, Any]]) -> None:
    spec = container(k8s)
    assert spec["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert spec["livenessProbe"]["httpGet"]["path"] == "/healthz"


@pytest.mark.anyio
async def test_every_probe_path_answers_200_once_the_app_has_started(
    started_app: Application, compose: dict[str, Any], k8s: dict[str, dict[str, Any]]
) -> None:
    paths = set(probe_paths(compose, k8s))
    assert {"/healthz", "/readyz"} <= paths
    transport = httpx.ASGITransport(app=started_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://10.0.0.7:8000") as client:
        for path in sorted(paths):
            answer = await client.get(path)
            assert answer.status_code == 200, (path, answer.text)


@pytest.mark.anyio
async def test_the_image_serves_the_example_catalog(started_app: Application) -> None:
    assert list(started_app.catalog.tools) == ["utc_offset"]
    assert started_app.catalog.server_info["name"] == "example-tools"


@pytest.mark.anyio
async def test_probes_fail_before_the_app_has_started(
    tmp_path: Path, redis_server: RedisServer, example_on_path: None
) -> None:
    env = local_redis(k8s_env(load_k8s()), redis_server)
    app = create_app(settings_from({**env, "MCP_RECORDS": "none"}))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://pod") as client:
        assert (await client.get("/readyz")).status_code == 503
        assert (await client.get("/nope")).status_code == 404


@pytest.mark.anyio
async def test_readiness_fails_at_start_when_the_records_folder_is_not_writable(
    tmp_path: Path, redis_server: RedisServer, example_on_path: None
) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the records folder should be")
    env = {
        **local_redis(k8s_env(load_k8s()), redis_server),
        "MCP_RECORDS_FILE": str(blocked / "mcp-requests.jsonl"),
    }
    app = create_app(settings_from(env))
    async with app.lifespan(app.starlette):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://pod") as client:
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/readyz")).status_code == 503


def test_nginx_prefix_is_the_replicas_root_path(compose: dict[str, Any]) -> None:
    location = nginx_location("/api/")
    (proxy_pass,) = nginx_directive("proxy_pass", location)
    assert proxy_pass.endswith("/"), "the trailing slash strips the prefix"
    (prefix_header,) = [v for v in nginx_directive("proxy_set_header", location)
                        if v.startswith("X-Forwarded-Prefix")]  # fmt: skip
    for name in REPLICAS:
        settings = settings_from(compose_env(compose, name))
        assert settings.root_path == "/api"
        assert prefix_header.split()[1] == settings.root_path


def test_nginx_streams_unbuffered_and_outlasts_the_keepalive(compose: dict[str, Any]) -> None:
    location = nginx_location("/api/")
    assert nginx_directive("proxy_buffering", location) == ["off"]
    assert nginx_directive("proxy_http_version", location) == ["1.1"]
    assert "gzip off" in location
    keepalive = max(settings_from(compose_env(compose, n)).keepalive_s for n in REPLICAS)
    for name in ("proxy_read_timeout", "proxy_send_timeout"):
        (value,) = nginx_directive(name, location)
        assert seconds(value) > 2 * keepalive, (name, value)
    (header_timeout,) = nginx_directive("client_header_timeout")
    assert seconds(header_timeout) <= 30, "cut slow clients early"
    (body,) = nginx_directive("client_max_body_size")
    assert size_bytes(body) >= settings_from(compose_env(compose, REPLICAS[0])).max_body_bytes


def test_nginx_closes_idle_upstream_connections_before_the_server_does(
    compose: dict[str, Any],
) -> None:
    # A request nginx writes on a kept-alive connection the server is closing (idle too long)
    # is lost: nginx does not retry a POST it has sent, the client gets a 502. nginx must give
    # up an idle connection first (tests/chaos/run.py shows the 502s otherwise).
    block = nginx_upstream_block()
    assert nginx_directive("keepalive", block), "upstream connections are reused"
    (timeout,) = nginx_directive("keepalive_timeout", block)
    for name in REPLICAS:
        assert seconds(timeout) < server_keepalive_s(settings_from(compose_env(compose, name)))


def test_nginx_never_marks_every_replica_down() -> None:
    # With nginx's default (max_fails=1 fail_timeout=10s) each replica a rolling restart stops
    # is out for 10 s: restarting three of them one after another left none, and nginx
    # answered 502 "no live upstreams" (tests/chaos/run.py). max_fails=0: a refused connect
    # sends that one request to the next replica, and nobody is marked down.
    servers = nginx_directive("server", nginx_upstream_block())
    assert servers
    for server in servers:
        assert "max_fails=0" in server.split(), server


def test_nginx_forwards_the_client_and_the_replicas_trust_only_nginx(
    compose: dict[str, Any],
) -> None:
    headers = dict(
        value.split(None, 1)
        for value in nginx_directive("proxy_set_header", nginx_location("/api/"))
    )
    assert headers["X-Forwarded-For"] == "$remote_addr", "replace what the client sent"
    assert headers["X-Forwarded-Proto"] == "$scheme"
    assert headers["X-Request-Id"] == "$request_id", "nginx's own id, never the client's"
    assert headers["Host"] == "$http_host"
    nginx_address = compose["services"]["nginx"]["networks"]["mcp"]["ipv4_address"]
    for name in REPLICAS:
        assert settings_from(compose_env(compose, name)).trusted_proxies == [nginx_address]


# -- shutdown, resources, security ---------------------------------------------------------------


def test_grace_periods_outlast_the_drain_deadline(
    compose: dict[str, Any], k8s: dict[str, dict[str, Any]]
) -> None:
    settings = settings_from(k8s_env(k8s))
    pod = k8s["Deployment"]["spec"]["template"]["spec"]
    pre_stop = " ".join(container(k8s)["lifecycle"]["preStop"]["exec"]["command"])
    (sleep_s,) = [float(n) for n in re.findall(r"sleep\((\d+(?:\.\d+)?)\)", pre_stop)]
    needed = sleep_s + settings.drain_timeout_s + settings.shutdown_grace_s
    assert pod["terminationGracePeriodSeconds"] > needed
    for name in REPLICAS:
        settings = settings_from(compose_env(compose, name))
        grace = seconds(compose["services"][name]["stop_grace_period"])
        assert grace > settings.drain_timeout_s + settings.shutdown_grace_s


def test_k8s_resources_and_a_restrictive_security_context(k8s: dict[str, dict[str, Any]]) -> None:
    pod = k8s["Deployment"]["spec"]["template"]["spec"]
    spec = container(k8s)
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(spec["resources"][kind])
    pod_context, context = pod["securityContext"], spec["securityContext"]
    assert pod_context["runAsNonRoot"] is True
    assert pod_context["runAsUser"] == image_uid()
    assert pod_context["seccompProfile"]["type"] == "RuntimeDefault"
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"]["drop"] == ["ALL"]
    assert not context["capabilities"].get("add")
    assert not context.get("privileged")
    assert pod.get("automountServiceAccountToken") is False


def test_the_records_folder_is_a_writable_volume(
    compose: dict[str, Any], k8s: dict[str, dict[str, Any]]
) -> None:
    folder = posixpath.dirname(posixpath.join("/app", settings_from(k8s_env(k8s)).records_file))
    mounts = {m["mountPath"]: m["name"] for m in container(k8s)["volumeMounts"]}
    volumes = {v["name"]: v for v in k8s["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts[folder]]
    for name in REPLICAS:
        settings = settings_from(compose_env(compose, name))
        folder = posixpath.dirname(posixpath.join("/app", settings.records_file))
        targets = [v.split(":")[1] for v in compose["services"][name]["volumes"]]
        assert folder in targets
        assert compose["services"][name]["read_only"] is True
