"""The container images (docker/*.Dockerfile and .dockerignore), checked without Docker: the
Dockerfiles are parsed and held to what the code expects, and the builder stage's COPY lines are
replayed through .dockerignore into a folder the project wheel is built from, so a file the wheel
needs but the build context lacks fails here, not in a registry build."""

from __future__ import annotations

import ast
import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import threading
import tomllib
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.parser import Parser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from serval_common.settings import ApiSettings, ClearMLSettings, NodeSettings, Settings
from tests.helpers import unavailable

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
DIST_NAME = PYPROJECT["project"]["name"]
PACKAGES = ("serval", "serval_common", "serval_api", "inference_gpu", "build_jobs", "serval_cli")
TORCH_PIN = "torch==2.13.0"
NON_ROOT_UID = "10001"


@dataclass(frozen=True)
class Image:
    dockerfile: str
    extras: frozenset[str]
    cuda: bool
    command: tuple[str, ...]
    """ENTRYPOINT + CMD as the image runs them by default."""
    packages: tuple[str, ...]
    """The first-party packages the component runs (their imports must be installed)."""
    cli: bool
    """Started through the `serval` CLI, whose module-level imports must be installed too."""


IMAGES = {
    # `clearml` rides along in the API image: the ClearML launcher is the only one that can run
    # build jobs from it (the local one would need the training stack in the API image).
    "api": Image(
        dockerfile="docker/api.Dockerfile",
        extras=frozenset({"api", "clearml"}),
        cuda=False,
        command=("serval", "api"),
        packages=("serval_api", "serval_common", "serval"),
        cli=True,
    ),
    "node": Image(
        dockerfile="docker/node.Dockerfile",
        extras=frozenset({"node", "smt"}),
        cuda=True,
        command=("serval", "node"),
        packages=("inference_gpu", "serval_common", "serval"),
        cli=True,
    ),
    "jobs": Image(
        dockerfile="docker/build-jobs.Dockerfile",
        # `api` too: on a single server this image runs `serval api` with local build jobs
        # (deploy/compose.yaml), the one launcher that needs the training stack beside the service.
        extras=frozenset({"api", "jobs", "smt", "clearml"}),
        cuda=True,
        command=("python3", "-m", "build_jobs", "--help"),
        packages=("build_jobs", "serval_common", "serval"),
        cli=False,
    ),
}


# --- parsing -------------------------------------------------------------------------------


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def values(self, instruction: str) -> list[str]:
        return [value for name, value in self.instructions if name == instruction]

    def last(self, instruction: str) -> str | None:
        found = self.values(instruction)
        return found[-1] if found else None

    def env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        for value in self.values("ENV"):
            for word in shlex.split(value):
                key, _, val = word.partition("=")
                env[key] = val
        return env

    def exec_form(self, instruction: str) -> list[str]:
        value = self.last(instruction)
        if value is None:
            return []
        parsed = json.loads(value)  # the shell form would run under /bin/sh -c and miss signals
        assert isinstance(parsed, list) and all(isinstance(x, str) for x in parsed), value
        return parsed


@dataclass
class Dockerfile:
    path: Path
    global_args: dict[str, str]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse(relative: str) -> Dockerfile:
    path = ROOT / relative
    parser = DockerfileParser(path=str(path), env_replace=False)
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for item in parser.structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "COMMENT":
            continue
        if instruction == "FROM":
            words = value.split()
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: global_args[m.group(1)], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif not stages:
            assert instruction == "ARG", f"{relative}: only ARG may come before the first FROM"
            key, _, default = value.partition("=")
            global_args[key] = default
        else:
            stages[-1].instructions.append((instruction, value))
    return Dockerfile(path, global_args, stages)


@pytest.fixture(scope="module", params=sorted(IMAGES))
def image(request: pytest.FixtureRequest) -> tuple[Image, Dockerfile]:
    spec = IMAGES[request.param]
    return spec, parse(spec.dockerfile)


def split_flags(value: str) -> tuple[dict[str, str], list[str]]:
    words = shlex.split(value)
    flags = {}
    while words and words[0].startswith("--"):
        key, _, val = words.pop(0)[2:].partition("=")
        flags[key] = val
    return flags, words


# --- .dockerignore ---------------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Docker (moby/patternmatcher) reads it: `*` and `?` stop at `/`,
    `**` spans folders."""
    out, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*" and pattern[i + 1 : i + 2] == "*":
            i += 1
            if pattern[i + 1 : i + 2] == "/":
                i += 1
            out += ".*" if i + 1 == len(pattern) else "(.*/)?"
        elif ch == "*":
            out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "[":
            end = pattern.index("]", i)
            out += pattern[i : end + 1]
            i = end
        else:
            out += re.escape(ch)
        i += 1
    return re.compile(out + "$")


def dockerignore() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = posixpath.normpath(line.lstrip("!").strip()).lstrip("/")
        rules.append((negated, _pattern_regex(pattern)))
    return rules


def excluded(relative: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent folders wins."""
    parts = relative.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    result = False
    for negated, regex in rules:
        if any(regex.match(candidate) for candidate in candidates):
            result = not negated
    return result


def context_files(source: Path, rules: list[tuple[bool, re.Pattern[str]]]) -> Iterator[Path]:
    """The files under `source` that reach the build context."""
    if source.is_file():
        if not excluded(source.relative_to(ROOT).as_posix(), rules):
            yield source
        return
    for path in sorted(source.rglob("*")):
        if path.is_file() and not excluded(path.relative_to(ROOT).as_posix(), rules):
            yield path


# --- the Dockerfiles -------------------------------------------------------------------------


def test_final_stage_runs_as_a_fixed_non_root_user(image: tuple[Image, Dockerfile]) -> None:
    _, dockerfile = image
    user = dockerfile.final.last("USER")
    assert user is not None, "the final stage must set USER"
    name, _, group = user.partition(":")
    assert name not in ("root", "0") and group not in ("root", "0"), user
    # numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd
    assert name == NON_ROOT_UID and group == NON_ROOT_UID, user
    assert f"--uid {NON_ROOT_UID}" in " ".join(dockerfile.final.values("RUN"))


def test_has_a_health_check(image: tuple[Image, Dockerfile]) -> None:
    spec, dockerfile = image
    check = dockerfile.final.last("HEALTHCHECK")
    assert check is not None and check.strip().upper() != "NONE"
    flags, _ = split_flags(check.split(" CMD ", 1)[0])
    assert {"interval", "timeout"} <= set(flags), check
    command = json.loads(check.split(" CMD ", 1)[1])
    assert command[:2] in (["python", "-c"], ["python3", "-c"]), command
    compile(command[2], "HEALTHCHECK", "exec")  # the one-liner is valid Python
    env = dockerfile.final.env()
    if spec is IMAGES["api"]:
        from serval_api.rest.status import router

        assert "/api/v1/status/ping" in {getattr(route, "path", None) for route in router.routes}
        assert "http://127.0.0.1:%s/api/v1/status/ping" in command[2]
        assert "SERVAL_API__REST_PORT" in command[2] and "'8080'" in command[2]
    elif spec is IMAGES["node"]:
        assert "/metrics" in command[2] and "SERVAL_NODE__METRICS_PORT" in command[2]
        assert int(env["SERVAL_NODE__METRICS_PORT"]) > 0, "the check scrapes the metrics port"
    else:
        assert "import build_jobs" in command[2] and "clearml" in command[2]


def _health_check(dockerfile: Dockerfile, env: dict[str, str]) -> int:
    """Run the image's health check command here, with this interpreter as the image's python."""
    check = dockerfile.final.last("HEALTHCHECK")
    assert check is not None
    command = json.loads(check.split(" CMD ", 1)[1])
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SERVAL_")}
    done = subprocess.run(
        [sys.executable, *command[1:]], env={**clean, **env}, capture_output=True, timeout=120
    )
    return done.returncode


@contextmanager
def http_server(path: str, status: int = 200) -> Iterator[int]:
    """A stand-in for the service on a free loopback port: `status` at `path`, 404 elsewhere."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status if self.path == path else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_health_checks_tell_up_from_down(image: tuple[Image, Dockerfile]) -> None:
    spec, dockerfile = image
    if spec is IMAGES["jobs"]:
        assert _health_check(dockerfile, {}) == 0, "the job environment does not import"
        return
    path, variable = (
        ("/api/v1/status/ping", "SERVAL_API__REST_PORT")
        if spec is IMAGES["api"]
        else ("/metrics", "SERVAL_NODE__METRICS_PORT")
    )
    with http_server(path) as port:
        assert _health_check(dockerfile, {variable: str(port)}) == 0
    with http_server(path, status=503) as port:
        assert _health_check(dockerfile, {variable: str(port)}) != 0
    with http_server("/elsewhere") as port:
        assert _health_check(dockerfile, {variable: str(port)}) != 0
    assert _health_check(dockerfile, {variable: str(port)}) != 0  # nothing listens any more
    if spec is IMAGES["node"]:
        assert _health_check(dockerfile, {variable: "0"}) == 0, "metrics off: nothing to check"


def test_installs_exactly_its_components_extras(image: tuple[Image, Dockerfile]) -> None:
    spec, dockerfile = image
    installs = [run for run in dockerfile.final.values("RUN") if "pip install" in run]
    pattern = rf"{re.escape(DIST_NAME)}\[([^\]]*)\]( @ file://)?"
    found = [m for run in installs for m in re.finditer(pattern, run)]
    assert len(found) == 1, f"one install of {DIST_NAME}[…] expected, found {[m.group(0) for m in found]}"
    extras = {extra.strip() for extra in found[0].group(1).split(",")}
    assert extras == spec.extras
    assert extras <= set(PYPROJECT["project"]["optional-dependencies"]) - {"dev"}
    assert found[0].group(2), "installed from the wheel the builder stage made, not from an index"
    assert not any(re.search(r"pip install\b.*(\s-e\s|--editable|\s\.(\s|$))", run) for run in installs)


def test_torch_is_only_ever_pinned_at_2_13_0(image: tuple[Image, Dockerfile]) -> None:
    spec, dockerfile = image
    assert TORCH_PIN in PYPROJECT["project"]["optional-dependencies"]["jobs"]
    pins = []
    for stage in dockerfile.stages:
        for instruction, value in stage.instructions:
            for match in re.finditer(r"\btorch\s*(===?|[<>!~]=|[<>])\s*[\w.+*]+", value):
                pins.append(match.group(0))
            if instruction == "RUN" and "pip install" in value:
                for word in shlex.split(value.replace("&&", " ")):
                    if re.fullmatch(r"torch(\[[^\]]*\])?([<>=!~].*)?", word):
                        assert word == TORCH_PIN, f"torch must be installed as {TORCH_PIN}, not {word!r}"
                        pins.append(word)
    assert all(pin == TORCH_PIN for pin in pins), pins
    assert bool(pins) == ("jobs" in spec.extras)


def test_exposes_the_ports_the_settings_use(image: tuple[Image, Dockerfile]) -> None:
    spec, dockerfile = image
    exposed = {
        int(port.split("/")[0]) for value in dockerfile.final.values("EXPOSE") for port in value.split()
    }
    env = dockerfile.final.env()
    if spec is IMAGES["api"]:
        rest, grpc = (
            ApiSettings.model_fields["rest_port"].default,
            ApiSettings.model_fields["grpc_port"].default,
        )
        assert exposed == {rest, grpc}
        assert int(env["SERVAL_API__REST_PORT"]) == rest and int(env["SERVAL_API__GRPC_PORT"]) == grpc
        assert env["SERVAL_API__HOST"] == "0.0.0.0", "the default 127.0.0.1 is unreachable from outside"
    elif spec is IMAGES["node"]:
        assert NodeSettings.model_fields["metrics_port"].default == 0, "metrics are off by default…"
        assert exposed == {int(env["SERVAL_NODE__METRICS_PORT"])}, "…so the image turns them on"
        assert env["SERVAL_NODE__METRICS_HOST"] == "0.0.0.0"
    else:
        assert exposed == set(), "a build job only dials out"


def test_serval_environment_variables_name_real_settings(
    image: tuple[Image, Dockerfile], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settings ignore unknown variables, so a misspelt SERVAL_… would be dropped silently."""
    _, dockerfile = image
    env = {name: value for name, value in dockerfile.final.env().items() if name.startswith("SERVAL_")}
    assert env
    for name in list(os.environ):
        if name.startswith("SERVAL_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    for name, value in env.items():
        target: object = settings
        for part in name.removeprefix("SERVAL_").lower().split("__"):
            assert part in type(target).model_fields, f"{name}: no setting {part!r}"  # type: ignore[attr-defined]
            target = getattr(target, part)
        assert str(target) == value, name


def test_runs_the_real_commands(image: tuple[Image, Dockerfile]) -> None:
    spec, dockerfile = image
    entrypoint, cmd = dockerfile.final.exec_form("ENTRYPOINT"), dockerfile.final.exec_form("CMD")
    assert tuple(entrypoint + cmd) == spec.command
    program = spec.command[0]
    if program in PYPROJECT["project"]["scripts"]:
        from serval_cli.main import app

        commands = {c.name or c.callback.__name__ for c in app.registered_commands if c.callback}
        assert spec.command[1] in commands
    else:
        assert program in ("python", "python3") and spec.command[1] == "-m"
        assert (ROOT / spec.command[2] / "__main__.py").is_file()
    if spec is IMAGES["jobs"]:
        # The ClearML agent runs `docker run <image> bash -c '…'`: an entry point would swallow it.
        assert not entrypoint
        from serval_api.builds.clearml_launcher import ClearMLJobLauncher
        from serval_common.jobs import JobSpec

        kwargs = ClearMLJobLauncher(Settings(), task_api=object()).create_kwargs(
            JobSpec(
                build_id="b",
                engine_id="e",
                source_language="eng_Latn",
                target_language="swh_Latn",
                revision=1,
                train=True,
                options_json="{}",
                store_url="s3://bucket",
                api_address="api:50051",
                job_token="t",
            )
        )
        assert kwargs["binary"] == program and kwargs["module"].split()[0] == spec.command[2]
        repository = ClearMLSettings.model_fields["image"].default.rsplit(":", 1)[0]
        assert f"-t {repository} " in dockerfile.path.read_text(encoding="utf-8")
        # the agent's bootstrap pip-installs clearml-agent into this interpreter as the image's user
        assert f"-o {NON_ROOT_UID} -g {NON_ROOT_UID} /opt/venv" in " ".join(dockerfile.final.values("RUN"))


def test_base_images(image: tuple[Image, Dockerfile]) -> None:
    spec, dockerfile = image
    builder = dockerfile.stages[0]
    assert builder.name and any("pip wheel" in run and "--no-deps" in run for run in builder.values("RUN"))
    copied_from = {split_flags(v)[0].get("from") for v in dockerfile.final.values("COPY")} - {None}
    assert copied_from == {builder.name}
    if not spec.cuda:
        assert dockerfile.final.base == "python:3.11-slim"
        return
    match = re.fullmatch(
        r"nvidia/cuda:(\d+)\.(\d+)\.\d+-(?:cudnn-)?runtime-ubuntu\d+\.\d+", dockerfile.final.base
    )
    assert match, f"{dockerfile.final.base} is not an NVIDIA CUDA runtime image"
    cuda = (int(match.group(1)), int(match.group(2)))
    assert any("python3.11 -m venv /opt/venv" in run for run in dockerfile.final.values("RUN"))
    pin = next(
        r for r in PYPROJECT["project"]["optional-dependencies"]["node"] if r.startswith("ctranslate2")
    )
    # ctranslate2's wheels dlopen libcublas.so.<major>: the base must carry that major version,
    # at least the minor the wheel was built with (its classifier).
    try:
        installed = metadata.distribution("ctranslate2")
    except metadata.PackageNotFoundError:
        unavailable("ctranslate2 (the node extra) is not installed here")
    assert pin == f"ctranslate2=={installed.version}"
    built = [
        tuple(int(x) for x in c.rsplit("::", 1)[1].strip().split("."))
        for c in installed.metadata.get_all("Classifier") or []
        if c.startswith("Environment :: GPU :: NVIDIA CUDA ::") and c.count("::") == 4
    ]
    assert built, "ctranslate2 declares no CUDA version"
    assert cuda[0] == built[0][0] and cuda >= built[0], (cuda, built)


def test_copied_files_exist_and_reach_the_build_context(image: tuple[Image, Dockerfile]) -> None:
    _, dockerfile = image
    rules = dockerignore()
    assert excluded(".venv/bin/python", rules) and excluded(".git/HEAD", rules)
    assert excluded("serval_api/__pycache__/app.cpython-311.pyc", rules)
    for stage in dockerfile.stages:
        for instruction, value in stage.instructions:
            if instruction not in ("COPY", "ADD"):
                continue
            flags, words = split_flags(value)
            if "from" in flags:
                continue
            assert instruction == "COPY", "ADD fetches and unpacks; COPY says what it does"
            for source in words[:-1]:
                relative = posixpath.normpath(source)
                assert not relative.startswith(".."), source
                assert (ROOT / relative).exists(), f"{source} is not in the repository"
                assert not excluded(relative, rules), f".dockerignore leaves {source} out"
                assert any(context_files(ROOT / relative, rules)), f"nothing of {source} reaches the context"


# --- the wheel -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel the builder stage makes: its COPY lines replayed through .dockerignore, then
    `pip wheel --no-deps` (without build isolation: the dev environment has the build backend)."""
    replays = set()
    for spec in IMAGES.values():
        builder = parse(spec.dockerfile).stages[0]
        assert builder.last("WORKDIR"), "COPY destinations are relative to the builder's WORKDIR"
        replays.add(tuple(v for v in builder.values("COPY") if "from" not in split_flags(v)[0]))
    assert len(replays) == 1, "the images' builder stages differ"
    context = tmp_path_factory.mktemp("context")
    rules = dockerignore()
    for value in next(iter(replays)):
        *sources, destination = split_flags(value)[1]
        for source in sources:
            base = ROOT / posixpath.normpath(source)
            for path in context_files(base, rules):
                if base.is_dir():
                    target = context / destination / path.relative_to(base)
                elif destination.endswith("/"):
                    target = context / destination / path.name
                else:
                    target = context / destination
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(out),
            str(context),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("*.whl")
    return built


def test_the_wheel_holds_every_package_and_data_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    assert expected - names == set(), "files the images would lack"
    for required in (
        "serval_cli/data/eng-swh.tsv",
        "serval_api/db/migrations/env.py",
        "serval_api/db/migrations/script.py.mako",
        "serval/py.typed",
        "serval/inference/v1/node_pb2.pyi",
    ):
        assert required in names
    assert any(n.startswith("serval_api/db/migrations/versions/0001_") for n in names)


def test_the_wheel_declares_the_extras_and_the_cli(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        info = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(archive.read(info).decode())
        entry_points = archive.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert canonicalize_name(meta["Name"]) == canonicalize_name(DIST_NAME)
    assert {"api", "node", "jobs", "clearml"} <= set(meta.get_all("Provides-Extra") or [])
    assert "serval = serval_cli.main:app" in entry_points
    requires = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    torch = [f"{r.name}{r.specifier}" for r in requires if r.name == "torch"]
    assert torch == [TORCH_PIN]


# --- what each image imports ---------------------------------------------------------------


def _closure(requirements: list[Requirement]) -> set[str]:
    """The installed distributions that `pip install` brings for these requirements."""
    found: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[Requirement, frozenset[str]]] = [(r, frozenset()) for r in requirements]
    while todo:
        requirement, wanted = todo.pop()  # `wanted`: the extras asked of the requiring distribution
        if requirement.marker and not any(
            requirement.marker.evaluate({"extra": extra}) for extra in (wanted or {""})
        ):
            continue
        name, extras = canonicalize_name(requirement.name), frozenset(requirement.extras)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found.add(name)
        todo.extend((Requirement(r), extras) for r in dist.requires or [])
    return found


_HANDLED = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


def _catches_import_errors(node: ast.Try) -> bool:
    for handler in node.handlers:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(kind is None or getattr(kind, "id", None) in _HANDLED for kind in kinds):
            return True
    return False


def _imports(paths: list[Path], *, module_level_only: bool) -> dict[str, str]:
    """Top-level modules imported by these files, each with one place that imports it; not those
    under `if TYPE_CHECKING:` or in a `try` that handles their absence, nor, with
    `module_level_only`, those inside functions (they run only when the function is called)."""
    found: dict[str, str] = {}

    def visit(node: ast.AST, where: str) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if module_level_only and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            return
        if isinstance(node, ast.Try) and _catches_import_errors(node):
            for child in (*node.handlers, *node.orelse, *node.finalbody):
                visit(child, where)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name.split(".")[0], f"{where}:{node.lineno}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.setdefault(node.module.split(".")[0], f"{where}:{node.lineno}")
        for child in ast.iter_child_nodes(node):
            visit(child, where)

    for path in paths:
        visit(ast.parse(path.read_text(encoding="utf-8")), str(path.relative_to(ROOT)))
    return found


def test_each_image_installs_what_its_component_imports(image: tuple[Image, Dockerfile]) -> None:
    """The extras an image installs hold every third-party module its component imports: the
    component's own packages throughout, and for `serval` the CLI's module-level imports."""
    spec, _ = image
    project = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    for extra in spec.extras:
        project += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"][extra]]
    installed = _closure(project)
    by_module = metadata.packages_distributions()
    files = [p for package in spec.packages for p in (ROOT / package).rglob("*.py")]
    imported = _imports(files, module_level_only=False)
    if spec.cli:
        imported.update(_imports(sorted((ROOT / "serval_cli").rglob("*.py")), module_level_only=True))
    missing = {}
    for module, where in imported.items():
        if module in sys.stdlib_module_names or module in PACKAGES or module == "__future__":
            continue
        dists = {canonicalize_name(d) for d in by_module.get(module, [])}
        if not dists & installed:
            missing[module] = where
    assert missing == {}, f"{spec.dockerfile} lacks what these import"
