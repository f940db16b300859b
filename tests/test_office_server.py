"""The single-server deployment (docs/office-server.md), as the IT person brings it up.

- `serval api --host 0.0.0.0` is reached from another address of this machine (127.0.0.2: every
  127/8 address reaches a 0.0.0.0 listener), as a translator's PC reaches the server; with the
  default host, 127.0.0.2 is refused, which is why the guide exists.
- The shipped systemd units pass `systemd-analyze verify` and run real `serval` commands with
  real settings; the compose file names the images, ports, commands and data folder that
  docker/*.Dockerfile and the settings really have.
"""

from __future__ import annotations

import base64
import configparser
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import httpx
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from typer.testing import CliRunner

from serval_cli import processes
from serval_cli.main import app
from serval_common.settings import ApiSettings, Settings
from tests.api.conftest import RunningApi
from tests.helpers import free_port, unavailable, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
OTHER_ADDRESS = "127.0.0.2"
"""Another address of this machine: what a translator's PC is to the server."""
runner = CliRunner()


def _refused(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(5)
        try:
            sock.connect((host, port))
        except ConnectionRefusedError:
            return True
    return False


def _grpc_status(target: str) -> int:
    with grpc.insecure_channel(target) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
    return int(answer.status)


def test_serval_api_on_0000_answers_another_address(tmp_path: Path, database_url: str) -> None:
    grpc_port, rest_port = free_port(), free_port()
    api = processes.start(
        [
            "api",
            "--host",
            "0.0.0.0",
            "--home",
            str(tmp_path),
            "--grpc-port",
            str(grpc_port),
            "--rest-port",
            str(rest_port),
        ],
        tmp_path / "api.log",
        {"SERVAL_DATABASE_URL": database_url},
    )
    try:
        wait_for_port(rest_port, api)
        base = f"http://{OTHER_ADDRESS}:{rest_port}"
        with httpx.Client(base_url=base, timeout=30) as client:
            ping = client.get("/api/v1/status/ping")
            assert ping.status_code == 200, ping.text
            # what a LibreTranslate tool asks first, keyless
            languages = client.get("/languages")
            assert languages.status_code == 200, languages.text
            assert isinstance(languages.json(), list)
        assert _grpc_status(f"{OTHER_ADDRESS}:{grpc_port}") == health_pb2.HealthCheckResponse.SERVING
    finally:
        code = processes.stop(api)
        print((tmp_path / "api.log").read_text()[-2000:])
    assert code == 0


def test_the_default_host_refuses_other_addresses(tmp_path: Path, database_url: str) -> None:
    assert ApiSettings().host == "127.0.0.1"
    running = RunningApi(
        Settings(home=tmp_path, database_url=database_url, api=ApiSettings(grpc_port=0, rest_port=0))
    )
    try:
        rest_port, grpc_port = running.service.rest_port, running.service.grpc_port
        assert rest_port is not None and grpc_port is not None
        assert httpx.get(f"{running.rest_url}/api/v1/status/ping", timeout=30).status_code == 200
        assert _refused(OTHER_ADDRESS, rest_port), "the default listens on 127.0.0.1 only"
        assert _refused(OTHER_ADDRESS, grpc_port)
    finally:
        running.close()


def test_the_host_option_is_documented() -> None:
    result = runner.invoke(app, ["api", "--help"], terminal_width=200)
    assert result.exit_code == 0
    assert "SERVAL_API__HOST" in result.output and "0.0.0.0" in result.output
    guide = (ROOT / "docs" / "office-server.md").read_text(encoding="utf-8")
    for doc in ("sil-converters.md", "libretranslate.md"):
        assert "office-server.md" in (ROOT / "docs" / doc).read_text(encoding="utf-8"), doc
    assert "--host" in guide and "SERVAL_API__HOST" in guide and "tls.md" in guide


# --- the shipped deployment files -----------------------------------------------------------------


def _env_file(path: Path) -> dict[str, str]:
    values = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name] = value
    return values


def _assert_real_setting(name: str) -> None:
    """Settings ignore unknown variables: a misspelt SERVAL_… would be dropped silently."""
    target: Any = Settings()
    for part in name.removeprefix("SERVAL_").lower().split("__"):
        assert part in type(target).model_fields, f"{name}: no setting {part!r}"
        target = getattr(target, part)


def _assert_cli_parses(args: list[str]) -> None:
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0, f"`serval {' '.join(args)}`:\n{result.output}"


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "systemd" / name, encoding="utf-8")
    return parser


def test_systemd_units(tmp_path: Path) -> None:
    env = _env_file(DEPLOY / "systemd" / "serval.env.example")
    assert env["SERVAL_API__HOST"] == "0.0.0.0", "the example must listen where translators reach it"
    for name in env:
        _assert_real_setting(name)
    commands = {}
    for unit_name, command in (("serval-api.service", "api"), ("serval-node.service", "node")):
        unit = _unit(unit_name)
        service = unit["Service"]
        assert service["EnvironmentFile"] == "/etc/serval/serval.env"
        assert service["User"] == "serval" and service["StateDirectory"] == "serval"
        assert service["WorkingDirectory"] == env["SERVAL_HOME"] == "/var/lib/serval"
        assert unit["Install"]["WantedBy"] == "multi-user.target"
        words = shlex.split(re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], service["ExecStart"]))
        assert words[0] == "/opt/serval-live/.venv/bin/serval" and words[1] == command
        _assert_cli_parses(words[1:])
        commands[command] = words
    node_address = commands["node"][commands["node"].index("--api-address") + 1]
    assert node_address == f"127.0.0.1:{env['SERVAL_API__GRPC_PORT']}", "the node dials the API service here"
    assert "serval-api.service" in _unit("serval-node.service")["Unit"]["After"]

    verify = shutil.which("systemd-analyze")
    if verify is None:
        unavailable("systemd-analyze (Debian's systemd package) is not installed")
    # The units as installed: /opt/serval-live/.venv/bin/serval becomes this checkout's real one.
    opt = tmp_path / "opt" / "serval-live" / ".venv" / "bin"
    opt.mkdir(parents=True)
    (opt / "serval").symlink_to(ROOT / ".venv" / "bin" / "serval")
    units = []
    for unit_name in ("serval-api.service", "serval-node.service"):
        text = (DEPLOY / "systemd" / unit_name).read_text(encoding="utf-8")
        (tmp_path / unit_name).write_text(
            text.replace("/opt/serval-live", str(tmp_path / "opt" / "serval-live"))
        )
        units.append(str(tmp_path / unit_name))
    result = subprocess.run(
        [verify, "verify", "--man=no", *units],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SYSTEMD_LOG_LEVEL": "warning"},
    )
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), (
        result.stdout + result.stderr
    )


def _dockerfile_tag(dockerfile: Path) -> str:
    match = re.search(r"docker build -f \S+ -t (\S+) \.", dockerfile.read_text(encoding="utf-8"))
    assert match, f"{dockerfile}: no `docker build … -t IMAGE .` line in its header"
    return match.group(1)


def _dockerfile_env(dockerfile: Path) -> dict[str, str]:
    text = dockerfile.read_text(encoding="utf-8")
    env = {}
    for block in re.findall(r"^ENV ((?:.*\\\n)*.*)$", text, flags=re.M):
        for word in shlex.split(block.replace("\\\n", " ")):
            name, _, value = word.partition("=")
            env[name] = value
    return env


def test_compose_file() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert set(services) == {"api", "node"}
    api, node = services["api"], services["node"]
    example = _env_file(DEPLOY / "serval.env.example")
    used = set(re.findall(r"\$\{(\w+)", (DEPLOY / "compose.yaml").read_text(encoding="utf-8")))
    assert used == set(example), "every ${…} in compose.yaml is in serval.env.example, and only those"

    for service, dockerfile in ((api, "docker/build-jobs.Dockerfile"), (node, "docker/node.Dockerfile")):
        assert service["build"] == {"context": "..", "dockerfile": dockerfile}
        assert (ROOT / dockerfile).is_file()
        assert service["image"].rsplit(":", 1)[0] == _dockerfile_tag(ROOT / dockerfile)
        assert service["restart"] == "unless-stopped", "started again at boot"
        home = _dockerfile_env(ROOT / dockerfile)["SERVAL_HOME"]
        assert service["environment"]["SERVAL_HOME"] == home
        assert service["volumes"] == [f"serval-data:{home}"], "one data folder: the store is shared"
        for name in service["environment"]:
            _assert_real_setting(name)
    assert "serval-data" in compose["volumes"]

    # `api`: the build-jobs image has no entry point; it runs the API service with local jobs.
    assert api["command"] == ["serval", "api"]
    _assert_cli_parses(api["command"][1:])
    env = api["environment"]
    assert env["SERVAL_API__HOST"] == "0.0.0.0"
    defaults = ApiSettings()
    assert int(env["SERVAL_API__REST_PORT"]) == defaults.rest_port
    assert int(env["SERVAL_API__GRPC_PORT"]) == defaults.grpc_port
    published = {int(port.rsplit(":", 1)[1]) for port in api["ports"]}
    assert published == {defaults.rest_port, defaults.grpc_port}
    assert f":{defaults.rest_port}/api/v1/status/ping" in " ".join(api["healthcheck"]["test"])

    # `node`: the node image's entry point is `serval`; it dials `api` on its gRPC port.
    assert _dockerfile_tag(ROOT / "docker/node.Dockerfile").endswith("/node")
    _assert_cli_parses(node["command"])
    assert node["command"][0] == "node"
    address = node["command"][node["command"].index("--api-address") + 1]
    assert address == f"api:{defaults.grpc_port}"
    assert node["depends_on"]["api"]["condition"] == "service_healthy"


def test_container_smoke_script_is_wired_into_ci() -> None:
    """CI runs the container smoke after `make test`; the script fails loudly, never skips."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.index("make test") < ci.index("make containers")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^containers:.*\n\t.*scripts/container-smoke\.sh", makefile, flags=re.M)
    script = (ROOT / "scripts" / "container-smoke.sh").read_text(encoding="utf-8")
    assert "set -euo pipefail" in script
    assert (
        subprocess.run(["bash", "-n", str(ROOT / "scripts" / "container-smoke.sh")], check=False).returncode
        == 0
    )
    # The kube play step: the chart's own API pod, rendered by scripts/render_api_pod.py (the Helm
    # SDK; never a helm or kubectl binary, which would dial localhost:8080), run and taken down.
    assert 'scripts/render_api_pod.py"' in script
    needed = ("podman kube play", "podman kube down", "--kube-play-only", 'grpc_serving "kube play API pod"')
    assert [text for text in needed if text not in script] == []
    assert script.index("kube_play_api\n\n# --- smoke: server") > script.index('grpc_serving "API container"')
    render = (ROOT / "scripts" / "render_api_pod.py").read_text(encoding="utf-8")
    assert "import helm_python" in render and "subprocess" not in render


def test_kube_play_pod_is_the_charts_api_deployment_on_host_ports(tmp_path: Path) -> None:
    """What scripts/render_api_pod.py gives `podman kube play` (rendered here, no podman): the
    chart's API Deployment on the local image with host ports on loopback, its claim, and the
    chart's Secret as a podman secret's JSON; no Service or ServiceAccount."""
    out = tmp_path / "kube"
    ports = ["--host-port", "http=18080", "--host-port", "grpc=15051"]
    command = [sys.executable, str(ROOT / "scripts" / "render_api_pod.py"), "--out", str(out), *ports]
    command += ["--image", "localhost/serval-live/api:ci"]
    rendered = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    assert rendered.returncode == 0, rendered.stderr
    assert "dropped Service" in rendered.stdout and "dropped ServiceAccount" in rendered.stdout
    docs = list(yaml.safe_load_all((out / "pod.yaml").read_text()))
    assert [doc["kind"] for doc in docs] == ["PersistentVolumeClaim", "Deployment"]
    pod = docs[1]["spec"]["template"]["spec"]
    (api,) = pod["containers"]
    assert (api["image"], api["imagePullPolicy"]) == ("localhost/serval-live/api:ci", "Never")
    published = {p["name"]: (p["containerPort"], p["hostIP"], p["hostPort"]) for p in api["ports"]}
    assert published == {"http": (8080, "127.0.0.1", 18080), "grpc": (50051, "127.0.0.1", 15051)}
    env = {item["name"]: item for item in api["env"]}
    secret = env["SERVAL_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    data = json.loads((out / "secrets" / f"{secret['name']}.json").read_text())
    assert base64.b64decode(data[secret["key"]]).decode() == "sqlite:////var/lib/serval/serval.db"
    assert (out / "volumes").read_text().splitlines() == [
        f"claim {docs[0]['metadata']['name']}",
        *(f"emptyDir {volume['name']}" for volume in pod["volumes"] if "emptyDir" in volume),
    ]
