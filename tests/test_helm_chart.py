"""The Helm chart (`helm/serval-live`): lint it and render it with a real Helm (helm-python-sdk
bundles Helm's Go SDK, offline), then validate every rendered manifest against the Kubernetes
schemas (kubernetes-validate, strict) and check what the deployment relies on."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm  # the dev extra: helm-python-sdk and kubernetes-validate
import kubernetes_validate
import pytest

from scripts.render_api_pod import KUBE_VERSION, documents
from scripts.render_api_pod import render as render_chart

HELM = Path(__file__).resolve().parents[1] / "helm"
CHART = HELM / "serval-live"
MONITORING = "monitoring.coreos.com/v1"
RELEASE, NAMESPACE = "serval", "serval"
# Kinds whose schemas kubernetes-validate does not ship (Prometheus operator CRDs): checked here.
CRD_REQUIRED = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ("selector", "endpoints"),
    ("monitoring.coreos.com/v1", "PrometheusRule"): ("groups",),
}
# API metric names the PrometheusRule may use: registered in serval_api/metrics.py.
API_METRICS = {
    "serval_api_connected_inference_nodes",
    "serval_api_builds",
    "serval_api_dispatch_queue_depth",
    "serval_api_grpc_request_duration_seconds_bucket",
    "serval_api_http_request_duration_seconds_bucket",
}


def values_file(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = helm.values_from_yaml((HELM / name).read_text())
    return loaded


def render(values: dict[str, Any] | None, *, api_versions: tuple[str, ...] = ()) -> dict[str, str]:
    return render_chart(values or {}, release=RELEASE, namespace=NAMESPACE, api_versions=api_versions)


@cache
def rendered(case: str) -> tuple[dict[str, str], tuple[dict[str, Any], ...]]:
    values, api_versions = CASES[case]
    manifests = render(values(), api_versions=api_versions)
    return manifests, tuple(documents(manifests))


def large_with(**changes: Any) -> dict[str, Any]:
    values = values_file("values-large.yaml")
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = values
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return values


CASES: dict[str, tuple[Any, tuple[str, ...]]] = {
    "small": (lambda: values_file("values-small.yaml"), ()),
    "large": (lambda: values_file("values-large.yaml"), (MONITORING,)),
    # The Prometheus operator absent: the monitoring objects are left out, the rest renders.
    "large-no-operator": (lambda: values_file("values-large.yaml"), ()),
    # The large installation with a StatefulSet API service (stable replica names) and no HPA.
    "statefulset-tls": (
        lambda: large_with(api__kind="StatefulSet", api__autoscaling={"enabled": False}),
        (MONITORING,),
    ),
}


def find(docs: Sequence[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]


def kinds(docs: Sequence[dict[str, Any]]) -> set[str]:
    return {d["kind"] for d in docs}


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def walk(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


# --- lint and schema ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["values-small.yaml", "values-large.yaml"])
def test_lint_is_clean(name: str) -> None:
    report = helm.lint(CHART, values_file(name), strict=True, kube_version=f"v{KUBE_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_manifest_validates_against_the_kubernetes_schemas(case: str) -> None:
    _, docs = rendered(case)
    assert docs
    for doc in docs:
        required = CRD_REQUIRED.get((doc["apiVersion"], doc["kind"]))
        if required is not None:
            assert doc["metadata"]["name"] and doc["metadata"]["labels"]
            assert all(field in doc["spec"] for field in required), doc
            if doc["kind"] == "ServiceMonitor":
                assert all(e.get("port") for e in doc["spec"]["endpoints"]), doc
            else:
                for group in doc["spec"]["groups"]:
                    assert group["name"] and group["rules"]
                    assert all(r.get("expr") and ("alert" in r or "record" in r) for r in group["rules"])
            continue
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']}: {e.message} at {list(e.path)}")


def test_values_schema_refuses_unknown_and_wrong_values() -> None:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(values_file("values-large.yaml"))
        for bad in (
            {"api": {"replica": 3}},
            {"jobs": {"launcher": "slurm"}},
            {"node": {"gpu": {"count": -1}}},
            {"store": {"type": "gcs"}},
        ):
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema(bad)


def test_defaults_fail_with_what_to_set() -> None:
    with pytest.raises(helm.HelmError) as raised:
        render(None)
    message = str(raised.value)
    assert "no database: set postgresql.enabled=true" in message
    assert "database.existingSecret" in message
    assert "store.s3.bucket" in message
    assert "node.token.existingSecret" in message


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"jobs__clearml__jobApiAddress": ""}, "jobs.clearml.jobApiAddress"),
        ({"tls__existingSecret": ""}, "tls.existingSecret"),
        ({"tls__caKey": ""}, "tls.caKey"),
        ({"postgresql": {"enabled": True}}, "two databases"),
        ({"store__type": "file"}, "store.type=s3"),
    ],
)
def test_inconsistent_values_fail_clearly(changes: dict[str, Any], expected: str) -> None:
    with pytest.raises(helm.HelmError, match=expected.replace(".", r"\.")):
        render(large_with(**changes), api_versions=(MONITORING,))


# --- what the components rely on -----------------------------------------------------------


@pytest.mark.parametrize("case", ["small", "large"])
def test_api_probes_point_at_the_unauthenticated_ping_on_the_rest_port(case: str) -> None:
    _, docs = rendered(case)
    workload = (
        find(docs, "StatefulSet", "serval-serval-live-api")
        if case == "small"
        else find(docs, "Deployment", "serval-api")
    )
    api = workload["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in api["ports"]}
    assert ports == {"http": 8080, "grpc": 50051}
    scheme = "HTTPS" if case == "large" else "HTTP"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = api[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == ("/api/v1/status/ping", "http", scheme)
    env = env_of(api)
    assert env["SERVAL_API__HOST"]["value"] == "0.0.0.0"
    assert env["SERVAL_API__INSTANCE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["SERVAL_API__REST_PORT"]["value"] == "8080"
    assert env["SERVAL_API__GRPC_PORT"]["value"] == "50051"


@pytest.mark.parametrize("case", ["small", "large"])
def test_nodes_dial_every_replica_through_the_headless_service(case: str) -> None:
    _, docs = rendered(case)
    base = "serval" if case == "large" else "serval-serval-live"
    headless = find(docs, "Service", f"{base}-api-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert [p["port"] for p in headless["spec"]["ports"]] == [50051]
    api_selector = find(docs, "Service", f"{base}-api")["spec"]["selector"]
    assert headless["spec"]["selector"] == api_selector
    node = find(docs, "Deployment", f"{base}-node")
    env = env_of(node["spec"]["template"]["spec"]["containers"][0])
    assert json.loads(env["SERVAL_NODE__API_ADDRESSES"]["value"]) == [f"{base}-api-headless:50051"]
    assert env["SERVAL_NODE__TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "serval-node-token",
        "key": "token",
    }
    assert env["SERVAL_NODE__METRICS_HOST"]["value"] == "0.0.0.0"


def test_large_nodes_request_a_gpu_and_drain_within_their_grace_period() -> None:
    _, docs = rendered("large")
    node = find(docs, "Deployment", "serval-node")
    assert node["spec"]["replicas"] == 4
    pod = node["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 1
    assert pod["terminationGracePeriodSeconds"] == 180
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert "podAntiAffinity" in pod["affinity"]
    cache_volume = next(v for v in pod["volumes"] if v["name"] == "cache")
    claim = cache_volume["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["resources"]["requests"]["storage"] == "100Gi"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "cache")
    assert env_of(container)["SERVAL_NODE__CACHE_DIR"]["value"] == mount["mountPath"]
    readiness = container["readinessProbe"]["httpGet"]
    assert (readiness["path"], readiness["port"]) == ("/metrics", "metrics")
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": 9102}


def test_small_node_runs_on_the_cpu_without_a_gpu() -> None:
    _, docs = rendered("small")
    node = find(docs, "Deployment")
    assert node["spec"]["replicas"] == 1
    container = node["spec"]["template"]["spec"]["containers"][0]
    assert not any("gpu" in key for key, _ in walk(container["resources"]))
    assert env_of(container)["SERVAL_NODE__DEVICE"]["value"] == "cpu"
    cache_volume = next(v for v in node["spec"]["template"]["spec"]["volumes"] if v["name"] == "cache")
    assert cache_volume["emptyDir"]["sizeLimit"] == "5Gi"


def node_budgets(values: dict[str, Any]) -> tuple[int, int]:
    """The node's memory and disk-cache budgets as the rendered Deployment sets them."""
    docs = documents(render(values, api_versions=(MONITORING,)))
    [node] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-node")]
    env = env_of(node["spec"]["template"]["spec"]["containers"][0])
    return (
        int(env["SERVAL_NODE__MEMORY_BUDGET_BYTES"]["value"]),
        int(env["SERVAL_NODE__CACHE_BUDGET_BYTES"]["value"]),
    )


def test_node_budgets_follow_its_resources_and_cache_volume() -> None:
    """The node keeps its models within its memory and its model files within the cache volume:
    three quarters of one GPU's memory (or of the container's memory limit on a CPU node), and 80%
    of the cache volume, unless the values give them."""
    gib = 1 << 30
    assert node_budgets(values_file("values-large.yaml")) == (int(0.75 * 80 * gib), int(0.8 * 100 * gib))
    assert node_budgets(values_file("values-small.yaml")) == (int(0.75 * 4 * gib), int(0.8 * 5 * gib))
    no_gpu_memory = large_with(node__gpu={"count": 1, "resourceName": "nvidia.com/gpu", "memory": ""})
    assert node_budgets(no_gpu_memory)[0] == int(0.75 * 48 * gib), "the memory limit, without gpu.memory"
    requests_only = large_with(
        node__gpu={"count": 0}, node__resources={"requests": {"memory": "1500M"}, "limits": None}
    )
    assert node_budgets(requests_only)[0] == int(0.75 * 1.5e9)
    unlimited = large_with(node__resources={"requests": None, "limits": None}, node__gpu={"count": 0})
    assert node_budgets(unlimited) == (0, int(0.8 * 100 * gib)), "no memory said: no derived budget"
    given = large_with(node__memoryBudgetBytes=12345, node__cache__budgetBytes=0)
    assert node_budgets(given) == (12345, 0), "given values win; 0 is unlimited"
    fractions = large_with(
        node__memoryBudgetFraction=0.5, node__cache__budgetFraction=0.5, node__cache__sizeLimit="1.5Gi"
    )
    assert node_budgets(fractions) == (40 * gib, int(0.75 * gib))
    shared = large_with(node__cache={"type": "existingClaim", "existingClaim": "models", "sizeLimit": "1Ti"})
    assert node_budgets(shared)[1] == 0, "a cache shared by every node gets no derived budget"
    with pytest.raises(helm.HelmError, match="not a quantity of bytes"):
        node_budgets(large_with(node__cache__sizeLimit="lots"))


def test_large_has_autoscaling_disruption_budgets_ingress_and_monitoring() -> None:
    _, docs = rendered("large")
    deployment = find(docs, "Deployment", "serval-api")
    assert "replicas" not in deployment["spec"]  # the HPA owns it
    hpa = find(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "serval-api",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 10)
    budgets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PodDisruptionBudget"}
    assert set(budgets) == {"serval-api", "serval-node"}
    assert (
        budgets["serval-api"]["spec"]["selector"]["matchLabels"]
        == deployment["spec"]["selector"]["matchLabels"]
    )
    ingresses = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Ingress"}
    assert set(ingresses) == {"serval-api-rest", "serval-api-grpc"}
    grpc_ingress = ingresses["serval-api-grpc"]
    assert grpc_ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == "GRPCS"
    assert grpc_ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"] == {
        "name": "grpc"
    }
    monitors = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceMonitor"}
    assert monitors == {"serval-api", "serval-node"}
    api_monitor = find(docs, "ServiceMonitor", "serval-api")
    assert api_monitor["spec"]["endpoints"][0]["scheme"] == "https"
    assert api_monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert "PrometheusRule" in kinds(docs)
    assert "Secret" not in kinds(docs)  # everything comes from existing Secrets
    assert not {"StatefulSet", "PersistentVolumeClaim"} & kinds(docs)  # external DB, S3 store


def test_monitoring_objects_need_the_prometheus_operator() -> None:
    manifests, docs = rendered("large-no-operator")
    assert not {"ServiceMonitor", "PrometheusRule"} & kinds(docs)
    notes = next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))
    assert "--api-versions monitoring.coreos.com/v1" in notes


def test_small_has_the_bundled_database_and_nothing_for_the_operator() -> None:
    _, docs = rendered("small")
    assert {"HorizontalPodAutoscaler", "PodDisruptionBudget", "Ingress", "NetworkPolicy"}.isdisjoint(
        kinds(docs)
    )
    assert {"ServiceMonitor", "PrometheusRule"}.isdisjoint(kinds(docs))
    api = find(docs, "StatefulSet", "serval-serval-live-api")
    assert api["spec"]["replicas"] == 1
    assert api["spec"]["serviceName"] == "serval-serval-live-api-headless"
    postgres = find(docs, "StatefulSet", "serval-serval-live-postgresql")
    assert postgres["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "2Gi"
    env = env_of(api["spec"]["template"]["spec"]["containers"][0])
    assert env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "serval-serval-live-postgresql",
        "key": "password",
    }
    assert env["SERVAL_DATABASE_URL"]["value"] == (
        "postgresql://serval:$(POSTGRES_PASSWORD)@serval-serval-live-postgresql:5432/serval"
    )
    # The one Secret: the generated database password, kept across upgrades and uninstalls.
    secret = find(docs, "Secret")
    assert secret["metadata"]["name"] == "serval-serval-live-postgresql"
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert env["SERVAL_STORE__URL"]["value"] == "file:///var/lib/serval-store"
    assert find(docs, "PersistentVolumeClaim")["metadata"]["name"] == "serval-serval-live-store"


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_secret_value_is_rendered_inline(case: str) -> None:
    _, docs = rendered(case)
    for doc in docs:
        if doc["kind"] == "Secret":
            assert case == "small" and doc["metadata"]["name"].endswith("-postgresql")
            continue
        for container in containers(doc) if doc["kind"] in ("Deployment", "StatefulSet") else []:
            for name, entry in env_of(container).items():
                sensitive = any(
                    word in name for word in ("TOKEN", "SECRET", "PASSWORD", "KEY", "DATABASE_URL")
                )
                if sensitive and not name.endswith("_FILE") and "value" in entry:
                    # Only the bundled database's URL, which expands the password from a Secret.
                    assert name == "SERVAL_DATABASE_URL" and "$(POSTGRES_PASSWORD)" in entry["value"], name
    large = {d["kind"] + "/" + d["metadata"]["name"]: d for d in rendered("large")[1]}
    api_env = env_of(large["Deployment/serval-api"]["spec"]["template"]["spec"]["containers"][0])
    assert api_env["SERVAL_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "serval-database",
        "key": "url",
    }
    for name, secret in {
        "SERVAL_STORE__S3_ACCESS_KEY_ID": "serval-s3",
        "SERVAL_STORE__S3_SECRET_ACCESS_KEY": "serval-s3",
        "SERVAL_JOBS__CLEARML__ACCESS_KEY": "serval-clearml",
        "SERVAL_JOBS__CLEARML__SECRET_KEY": "serval-clearml",
        "SERVAL_API__DOWNLOAD_SECRET": "serval-api",
        "SERVAL_AUTH__JWT_SECRET": "serval-api",
    }.items():
        assert api_env[name]["valueFrom"]["secretKeyRef"]["name"] == secret, name


def test_explicit_values_go_into_the_charts_own_secret() -> None:
    values = large_with(database__existingSecret="", node__token={"existingSecret": "", "value": "n0de"})
    values["database"]["url"] = "postgresql://serval:pw@db:5432/serval"
    docs = documents(render(values, api_versions=(MONITORING,)))
    secret = find(docs, "Secret", "serval")
    assert set(secret["data"]) == {"database-url", "node-token"}
    text = json.dumps([d for d in docs if d["kind"] != "Secret"])
    assert "n0de" not in text and "serval:pw@" not in text


def test_tls_reaches_the_api_nodes_and_local_jobs_without_spreading_the_key() -> None:
    _, docs = rendered("statefulset-tls")
    api = find(docs, "StatefulSet", "serval-api")
    pod = api["spec"]["template"]["spec"]
    env = env_of(pod["containers"][0])
    assert env["SERVAL_API__TLS_CERT_FILE"]["value"] == "/etc/serval/tls/tls.crt"
    assert env["SERVAL_API__TLS_KEY_FILE"]["value"] == "/etc/serval/tls/tls.key"
    tls_volume = next(v for v in pod["volumes"] if v["name"] == "tls")["secret"]
    assert tls_volume["secretName"] == "serval-api-tls"
    assert {i["path"] for i in tls_volume["items"]} == {"tls.crt", "tls.key"}
    node_pod = find(docs, "Deployment", "serval-node")["spec"]["template"]["spec"]
    node_env = env_of(node_pod["containers"][0])
    assert node_env["SERVAL_NODE__TLS_CA_FILE"]["value"] == "/etc/serval/ca/ca.crt"
    assert node_env["SERVAL_NODE__TLS_SERVER_NAME"]["value"] == "serval-api"
    node_secrets = [v["secret"] for v in node_pod["volumes"] if "secret" in v]
    assert [[i["key"] for i in s["items"]] for s in node_secrets] == [["ca.crt"]]
    assert find(docs, "Service", "serval-api")["spec"]["ports"][0]["appProtocol"] == "https"


@pytest.mark.parametrize("case", ["small", "large"])
def test_containers_run_unprivileged_with_read_only_root(case: str) -> None:
    _, docs = rendered(case)
    for doc in docs:
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["automountServiceAccountToken"] is False
        mounted = set()
        for container in containers(doc):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            mounted |= {m["mountPath"] for m in container.get("volumeMounts", [])}
        if doc["metadata"]["name"].endswith(("-api", "-node")):
            assert {"/tmp", "/var/lib/serval", "/home/serval"} <= mounted


def test_network_policies_allow_nodes_to_api_grpc_and_api_to_the_database() -> None:
    _, docs = rendered("large")
    policies = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}
    assert set(policies) == {"serval-api", "serval-node"}
    node_labels = find(docs, "Deployment", "serval-node")["spec"]["selector"]["matchLabels"]
    api_labels = find(docs, "Deployment", "serval-api")["spec"]["selector"]["matchLabels"]
    api = policies["serval-api"]
    assert api["podSelector"]["matchLabels"] == api_labels
    node_rule = next(r for r in api["ingress"] if "podSelector" in r.get("from", [{}])[0])
    assert node_rule["from"][0]["podSelector"]["matchLabels"] == node_labels
    assert node_rule["ports"] == [{"port": 50051, "protocol": "TCP"}]
    assert {"port": 5432, "protocol": "TCP"} in [p for r in api["egress"] for p in r.get("ports", [])]
    database_rule = next(r for r in api["egress"] if {"port": 5432, "protocol": "TCP"} in r.get("ports", []))
    assert database_rule["to"] == [{"ipBlock": {"cidr": "10.20.0.0/16"}}]
    node = policies["serval-node"]
    to_api = next(r for r in node["egress"] if {"port": 50051, "protocol": "TCP"} in r.get("ports", []))
    assert to_api["to"][0]["podSelector"]["matchLabels"] == api_labels
    assert to_api["ports"] == [{"port": 50051, "protocol": "TCP"}]

    # The bundled database: only the API service may reach it.
    small = values_file("values-small.yaml") | {"networkPolicy": {"enabled": True}}
    docs_small = documents(render(small))
    pg = find(docs_small, "NetworkPolicy", "serval-serval-live-postgresql")["spec"]
    small_api = find(docs_small, "NetworkPolicy", "serval-serval-live-api")["spec"]
    assert pg["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "api"
    assert pg["ingress"][0]["ports"] == [{"port": 5432, "protocol": "TCP"}]
    pg_rule = next(r for r in small_api["egress"] if {"port": 5432, "protocol": "TCP"} in r.get("ports", []))
    assert pg_rule["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "postgresql"


def test_prometheus_rules_use_metrics_the_api_service_exports() -> None:
    import re

    from serval_api.metrics import ApiMetrics

    metrics = ApiMetrics()
    metrics.grpc_latency.labels("/serval.translation.v1.TranslationEngineApi/Translate").observe(0.1)
    metrics.http_latency.labels("POST", "/api/v1/translation/engines/{engine_id}/translate").observe(0.1)
    exported = set()
    for metric in metrics.registry.collect():
        exported |= {sample.name for sample in metric.samples} | {metric.name}
    assert exported >= API_METRICS

    _, docs = rendered("large")
    rules = find(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
    by_name = {r["alert"]: r["expr"] for r in rules}
    assert set(by_name) >= {
        "ServalNoInferenceNodes",
        "ServalBuildFailureRateHigh",
        "ServalDispatchQueueSaturated",
        "ServalTranslateLatencyHigh",
    }
    assert "serval_api_connected_inference_nodes" in by_name["ServalNoInferenceNodes"]
    assert (
        'serval_api_builds{namespace="serval",job="serval-api",state="Faulted"}'
        in by_name["ServalBuildFailureRateHigh"]
    )
    assert "serval_api_dispatch_queue_depth" in by_name["ServalDispatchQueueSaturated"]
    assert "/ 2000 > 0.8" in by_name["ServalDispatchQueueSaturated"]  # api.maxQueuedRequests
    assert "histogram_quantile(0.99" in by_name["ServalTranslateLatencyHigh"]
    used = {m for expr in by_name.values() for m in re.findall(r"\b(serval_api_[a-z_]+)\b", expr)}
    assert used <= API_METRICS, used - API_METRICS
    api = find(docs, "Deployment", "serval-api")
    env = env_of(api["spec"]["template"]["spec"]["containers"][0])
    assert env["SERVAL_API__MAX_QUEUED_REQUESTS"]["value"] == "2000"
