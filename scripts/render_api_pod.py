"""Render the Helm chart's API workload for `podman kube play` (scripts/container-smoke.sh).

The chart (helm/serval-live) is rendered with the Helm the chart's tests use: helm-python-sdk,
which bundles Helm's Go SDK and renders offline (no `helm` binary, no cluster, no kubeconfig).
The values: `api.kind=Deployment` with one replica on a local image, no inference nodes, the
embedded SQLite database (the chart offers no SQLite switch, but `database.url` takes any
SQLAlchemy URL: a file on the API pod's `data` emptyDir, /var/lib/serval, which one replica
alone uses) and the model store on a volume (`store.type=file`, a PersistentVolumeClaim).

Written under OUT:

- `pod.yaml`, for `podman kube play`: the API Deployment as the chart renders it, except that each
  container port gets `hostIP` 127.0.0.1 and a `hostPort` (`--host-port NAME=PORT` for every
  port), and the chart's PersistentVolumeClaims (kube play makes them podman volumes) and
  ConfigMaps (none with these values).
- `secrets/NAME.json` for each Secret the pod references (the chart's own Secret, holding the
  database URL): the Secret's data as a JSON object of base64 values, for
  `podman secret create NAME FILE` before kube play. Not a Secret object in pod.yaml: podman 4.3
  (Debian bookworm's, which CI installs) creates one from the kube YAML but its `secretKeyRef`
  lookup then refuses it ("secret … is not valid JSON"): that lookup reads only such a JSON object.
- `volumes`: the podman volumes kube play will make (claims, then emptyDirs: `claim NAME` and
  `emptyDir NAME`), one a line, for the caller to check beforehand and remove afterwards.

Dropped, each named on stdout with the reason: the Services and the ServiceAccount, and any other
kind kube play does not run. Every Secret or ConfigMap the pod references must be one the chart
renders (no `existingSecret`): anything else is an error, as is a port without a host port.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import Any

import helm_python as helm  # the dev extra (helm-python-sdk), as tests/test_helm_chart.py
import yaml
from helm_python import _native

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "serval-live"
KUBE_VERSION = "1.33.0"
"""The Kubernetes version the chart is rendered and validated for (tests/test_helm_chart.py too)."""
# What `podman kube play` does not run, and why it is left out.
DROPPED = {
    "Service": "kube play makes no Services (no cluster network): the ports are host ports instead",
    "ServiceAccount": "no Kubernetes API to authenticate to (the pod mounts no token anyway)",
    "NetworkPolicy": "kube play enforces no network policies",
    "Ingress": "kube play has no ingress controller",
    "PodDisruptionBudget": "kube play evicts nothing",
    "HorizontalPodAutoscaler": "kube play scales nothing",
    "ServiceMonitor": "no Prometheus operator",
    "PrometheusRule": "no Prometheus operator",
}
KEPT = ("PersistentVolumeClaim", "ConfigMap")


def values(image: str, pull_policy: str) -> dict[str, Any]:
    repository, _, tag = image.rpartition(":")
    if not repository or "/" in tag:
        raise SystemExit(f"--image {image!r}: give repository:tag")
    return {
        "api": {
            "kind": "Deployment",
            "replicas": 1,
            "image": {"repository": repository, "tag": tag, "pullPolicy": pull_policy},
        },
        "node": {"enabled": False},
        "database": {"url": "sqlite:////var/lib/serval/serval.db"},
        "store": {"type": "file"},
    }


def render(
    chart_values: dict[str, Any], *, release: str, namespace: str, api_versions: tuple[str, ...] = ()
) -> dict[str, str]:
    """`helm template --kube-version --api-versions`: each template's rendered text by its path.
    The SDK's `Chart.render` has no parameter for the Kubernetes version the chart's `kubeVersion`
    is checked against, nor for the API versions, but its native call takes them as options.
    tests/test_helm_chart.py renders the chart with this too."""
    options = {
        "name": release,
        "namespace": namespace,
        "is_install": True,
        "kube_version": f"v{KUBE_VERSION}",
        "api_versions": list(api_versions),
    }
    with helm.Chart.load(CHART) as chart:
        rendered = _native.call_string(
            "helm_render", chart._raw(), json.dumps(chart_values), json.dumps(options)
        )
    manifests: dict[str, str] = json.loads(rendered)
    return manifests


def documents(manifests: dict[str, str]) -> list[dict[str, Any]]:
    """The rendered objects, NOTES.txt left out."""
    return [
        doc
        for path, text in sorted(manifests.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def referenced(pod: dict[str, Any], kind: str) -> set[str]:
    """Names of the Secrets (kind "secret") or ConfigMaps ("configMap") the pod spec uses."""
    names: set[str] = set()
    for container in pod.get("initContainers", []) + pod["containers"]:
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get(f"{kind}KeyRef")
            if ref:
                names.add(ref["name"])
        for source in container.get("envFrom", []):
            if f"{kind}Ref" in source:
                names.add(source[f"{kind}Ref"]["name"])
    for volume in pod.get("volumes", []):
        if kind in volume:
            names.add(volume[kind]["secretName" if kind == "secret" else "name"])
    return names


def secret_data(secret: dict[str, Any]) -> dict[str, str]:
    data = dict(secret.get("data") or {})
    for key, value in (secret.get("stringData") or {}).items():
        data[key] = base64.b64encode(str(value).encode()).decode()
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", required=True, help="the API image, repository:tag")
    parser.add_argument("--pull-policy", default="Never", choices=["Never", "IfNotPresent"])
    parser.add_argument("--release", default="serval-smoke")
    parser.add_argument(
        "--host-port", action="append", default=[], metavar="NAME=PORT", help="for every container port"
    )
    parser.add_argument("--host-ip", default="127.0.0.1")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    host_ports = {}
    for item in args.host_port:
        name, _, port = item.partition("=")
        if not port.isdigit():
            parser.error(f"--host-port {item!r}: give NAME=PORT")
        host_ports[name] = int(port)

    docs = documents(render(values(args.image, args.pull_policy), release=args.release, namespace="default"))
    api = [
        doc
        for doc in docs
        if doc["kind"] in ("Deployment", "StatefulSet")
        and doc["metadata"]["labels"].get("app.kubernetes.io/component") == "api"
    ]
    if len(api) != 1 or api[0]["kind"] != "Deployment":
        raise SystemExit(f"expected one API Deployment, the chart rendered {[d['kind'] for d in api]}")
    deployment = api[0]
    pod = deployment["spec"]["template"]["spec"]
    for container in pod["containers"]:
        for port in container.get("ports", []):
            if port.get("name") not in host_ports:
                raise SystemExit(
                    f"container {container['name']} port {port.get('name')} "
                    f"({port['containerPort']}) has no --host-port"
                )
            port["hostPort"] = host_ports[port["name"]]
            port["hostIP"] = args.host_ip

    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for doc in docs:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    missing = [
        f"{kind} {name}"
        for kind, key in (("Secret", "secret"), ("ConfigMap", "configMap"))
        for name in sorted(referenced(pod, key))
        if name not in by_kind.get(kind, {})
    ]
    if missing:
        raise SystemExit(f"the pod references objects the chart does not render: {', '.join(missing)}")

    secrets_dir = args.out / "secrets"
    secrets_dir.mkdir(parents=True, exist_ok=True)
    kept: list[dict[str, Any]] = []  # then the Deployment: what it mounts comes first
    report = [
        f"kept Deployment {deployment['metadata']['name']} (host ports "
        + ", ".join(f"{name} {args.host_ip}:{port}" for name, port in sorted(host_ports.items()))
        + ")"
    ]
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if doc is deployment:
            continue
        if kind in KEPT:
            kept.append(doc)
            report.append(f"kept {kind} {name}")
        elif kind == "Secret":
            path = secrets_dir / f"{name}.json"
            path.write_text(json.dumps(secret_data(doc)))
            path.chmod(0o600)
            report.append(f"secret {name}: a podman secret made beforehand (podman 4.3's secretKeyRef)")
        else:
            reason = DROPPED.get(kind, "kube play does not run this kind")
            report.append(f"dropped {kind} {name}: {reason}")

    kept.append(deployment)
    volumes = [f"claim {doc['metadata']['name']}" for doc in kept if doc["kind"] == "PersistentVolumeClaim"]
    volumes += [f"emptyDir {volume['name']}" for volume in pod.get("volumes", []) if "emptyDir" in volume]
    (args.out / "pod.yaml").write_text(yaml.safe_dump_all(kept, sort_keys=False))
    (args.out / "volumes").write_text("".join(f"{line}\n" for line in volumes))
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
