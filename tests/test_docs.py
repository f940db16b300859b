"""The documentation describes the system as built:

- every relative link in README.md and docs/ (generated reference included) resolves to a file,
  and every `#anchor` to a heading or an `<a id>` in the target;
- every `serval …` command shown (in shell code blocks and in inline code) names a real command
  with real options: shell lines run through the real CLI with `--help` appended, so the command
  and its options must exist while nothing runs;
- the examples of docs/interactive-translation.md marked `<!-- doc-test -->` run, in order, against
  a real API service with an echo engine: the shell blocks in one bash session (real curl), the
  Python blocks in one Python process;
- every repository path (`serval_api/service/translation.py`, `tests/…::test`) or dotted module named
  in the docs, README.md, bench/README.md, tests/README.md and the packages' docstrings and comments
  exists;
- the Grafana dashboard parses, its panel ids are unique, and its queries name only metrics the
  API service and the inference node register, every one of them at least once.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
from prometheus_client import CollectorRegistry
from typer.core import TyperGroup
from typer.testing import CliRunner

from serval_cli.main import app
from tests.helpers import unavailable

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARKDOWN = sorted([ROOT / "README.md", *DOCS.glob("*.md"), *DOCS.glob("*/*.md")])
DASHBOARD = DOCS / "grafana" / "serval-dashboard.json"
RUN_MARKER = "<!-- doc-test -->"
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


# ---- Markdown -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fence:
    language: str
    code: str
    line: int
    marked: bool
    """Preceded by the `<!-- doc-test -->` marker: an example the tests run."""


FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")


def fences(text: str) -> list[Fence]:
    found: list[Fence] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        marker, start = match["fence"], i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(marker):
            body.append(
                lines[i][len(match["indent"]) :] if lines[i].startswith(match["indent"]) else lines[i]
            )
            i += 1
        previous = next((line.strip() for line in reversed(lines[:start]) if line.strip()), "")
        language = (match["info"].strip().split() or [""])[0].lower()
        found.append(Fence(language, "\n".join(body) + "\n", start + 1, previous == RUN_MARKER))
        i += 1
    return found


def prose(text: str) -> str:
    """The text outside fenced code blocks (each block's lines blanked, so line numbers stay)."""
    out: list[str] = []
    inside: str | None = None
    for line in text.splitlines():
        match = FENCE.match(line)
        if inside is None and match:
            inside = match["fence"]
            out.append("")
        elif inside is not None:
            if line.strip().startswith(inside):
                inside = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)


def links(text: str) -> Iterator[str]:
    without_code = INLINE_CODE.sub("", prose(text))
    for match in LINK.finditer(without_code):
        yield match.group(1)


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, punctuation other than `-` and `_`
    dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    found = set(HTML_ANCHOR.findall(text))
    seen: dict[str, int] = {}
    for line in prose(text).splitlines():
        heading = HEADING.match(line)
        if heading:
            slug = github_slug(heading.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


@pytest.mark.parametrize("path", MARKDOWN, ids=_id)
def test_relative_links_resolve(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    broken = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no such anchor in {_id(resolved)}")
    assert not broken, f"{_id(path)}: " + "; ".join(broken)


# ---- `serval …` commands ---------------------------------------------------------------------

PLACEHOLDER = re.compile(r"<[^<>\n]+>")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def shell_commands(code: str) -> Iterator[list[str]]:
    """The simple commands of a shell snippet whose program is `serval`, as argument lists
    (placeholders such as `<engine id>` as one word; variable assignments before it dropped)."""
    joined = re.sub(r"\\\n", " ", code)
    for line in joined.splitlines():
        if "serval" not in line:
            continue
        lexer = shlex.shlex(PLACEHOLDER.sub("PLACEHOLDER", line), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set("();<>|&"):
                while words and ENV_ASSIGNMENT.match(words[0]):
                    words.pop(0)
                if words and words[0] in ("$", "$("):
                    words.pop(0)
                if words and words[0] == "serval":
                    yield words[1:]
                words = []
            else:
                words.append(token)


NOT_COMMANDS = {"serval build <build> (engine <engine>)"}
"""Inline code that starts with `serval ` but is no command (a ClearML task's name)."""


def inline_commands(text: str) -> Iterator[str]:
    for match in INLINE_CODE.finditer(prose(text)):
        code = match.group(2).strip()
        if re.match(r"^serval\s", code) and code not in NOT_COMMANDS:
            yield code


def documented_commands() -> Iterator[tuple[str, str, list[str] | str]]:
    for path in MARKDOWN:
        text = path.read_text(encoding="utf-8")
        for fence in fences(text):
            if fence.language in SHELL_LANGUAGES:
                for args in shell_commands(fence.code):
                    yield f"{_id(path)}:{fence.line}", "shell", args
        for code in inline_commands(text):
            yield _id(path), "inline", code


COMMANDS = list(documented_commands())
SHELL_COMMANDS = [(where, args) for where, _, args in COMMANDS if isinstance(args, list)]
INLINE = sorted({(where, code) for where, _, code in COMMANDS if isinstance(code, str)})


def test_docs_show_serval_commands() -> None:
    """The extraction finds the commands (a broken parser would pass every check vacuously)."""
    assert len(SHELL_COMMANDS) >= 20
    assert len(INLINE) >= 20
    shown = {" ".join(args[:3]) for _, args in SHELL_COMMANDS}
    assert {"admin api-key create", "admin node-token create", "api"} <= shown


runner = CliRunner()


@pytest.mark.parametrize(
    ("where", "args"), SHELL_COMMANDS, ids=[f"{w}: serval {' '.join(a)}" for w, a in SHELL_COMMANDS]
)
def test_shell_command_parses(where: str, args: list[str]) -> None:
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0, f"{where}: `serval {' '.join(args)}`:\n{result.output}"


CLI = typer.main.get_command(app)


def _resolve(words: list[str]) -> tuple[Any, list[str]]:
    """The command the leading words name, and the words after it; `list|drain` names several
    commands of one group (each must exist; the first is returned)."""
    command: Any = CLI
    rest = list(words)
    while isinstance(command, TyperGroup) and rest:
        found = [command.get_command(typer.Context(command), name) for name in rest[0].split("|")]
        if not all(found) or found[0] is None:
            break
        command, rest = found[0], rest[1:]
    return command, rest


@pytest.mark.parametrize(("where", "code"), INLINE, ids=[f"{w}: {c}" for w, c in INLINE])
def test_inline_command_exists(where: str, code: str) -> None:
    """Inline code such as `serval build start ENGINE [--train-on PC …] [--watch]`: the command
    path must exist and every `--option` must be one of that command's."""
    words = PLACEHOLDER.sub("X", code).split()[1:]
    command, rest = _resolve(words)
    if isinstance(command, TyperGroup) and rest:
        first = rest[0]
        assert first in ("…", "...") or first.startswith(("-", "[")), (
            f"{where}: `{code}`: {command.name} has no command {first!r}"
        )
    options = {"--help"}
    for param in command.params:
        options.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("-"))
    for word in rest:
        option = re.match(r"^\[?(--[a-z0-9-]+)", word)
        if option:
            assert option.group(1) in options, f"{where}: `{code}`: no option {option.group(1)}"


# ---- build options ---------------------------------------------------------------------------


def test_every_build_option_is_documented_with_its_default() -> None:
    from serval_common.build_options import NmtBuildOptions

    text = (DOCS / "build-options.md").read_text(encoding="utf-8")
    rows = {match.group(1): match.group(0) for match in re.finditer(r"^\| `(\w+)` \|.*$", text, re.MULTILINE)}
    for name, field in NmtBuildOptions.model_fields.items():
        key = field.alias or name
        assert key in rows, f"build option {key} is not in docs/build-options.md"
        default = field.get_default(call_default_factory=True)
        assert f"`{json.dumps(default)}`" in rows[key], f"{key}: the default is {json.dumps(default)}"
    assert set(rows) <= {field.alias or name for name, field in NmtBuildOptions.model_fields.items()}


# ---- the interactive-translation guide's examples --------------------------------------------

GUIDE = DOCS / "interactive-translation.md"


def guide_examples() -> tuple[str, str]:
    marked = [fence for fence in fences(GUIDE.read_text(encoding="utf-8")) if fence.marked]
    shell = "".join(f.code for f in marked if f.language in SHELL_LANGUAGES)
    python = "".join(f.code for f in marked if f.language == "python")
    return shell, python


def test_guide_examples_are_marked() -> None:
    shell, python = guide_examples()
    for call in ("translate", "translate/3", "translate-prefix", "get-word-graph", "train-segment"):
        assert f'"$ENGINE/{call}"' in shell, call
        assert f'"{call}"' in python, call
    for rpc in ("Translate", "TranslatePrefix", "GetWordGraph", "TrainSegmentPair"):
        assert f"engines.{rpc}" in python, rpc


@pytest.fixture
def running_api(tmp_path: Path) -> Iterator[Any]:
    from serval_common.settings import ApiSettings, Settings
    from tests.api.conftest import RunningApi

    settings = Settings(home=tmp_path, api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0))
    api = RunningApi(settings)
    try:
        yield api
    finally:
        api.close()


def test_guide_examples_run(running_api: Any) -> None:
    if not (shutil.which("curl") and shutil.which("jq")):
        unavailable("the guide's shell examples need curl and jq (scripts/system-packages.sh installs them)")
    shell, python = guide_examples()
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SERVAL_URL": running_api.rest_url,
        "SERVAL_ADDRESS": running_api.grpc_target,
        "SERVAL_API_KEY": running_api.api_key(),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", shell + 'printf "\\nENGINE_ID=%s\\n" "$ENGINE_ID"\n'],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"shell examples failed:\n{done.stdout}\n{done.stderr}"
    assert "Completed" in done.stdout
    assert '"sources":[["Human"]' in done.stdout.replace(" ", "")
    engine_id = done.stdout.strip().splitlines()[-1].removeprefix("ENGINE_ID=")
    assert re.fullmatch(r"[0-9a-f]{24}", engine_id), done.stdout

    env["ENGINE_ID"] = engine_id
    done = subprocess.run(
        [sys.executable, "-c", python], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, f"Python examples failed:\n{done.stdout}\n{done.stderr}"
    assert "Naye Neno alikuwa Mungu. ['Human']" in done.stdout
    assert "In the beginning was the Word. — model revision 1" in done.stdout
    assert "NOT_FOUND" in done.stdout
    assert "completion: In the beginning was the Word ." in done.stdout


# ---- the Grafana dashboard -------------------------------------------------------------------

SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("_info",),
}


def exported_series(registry: CollectorRegistry) -> dict[str, str]:
    """Every series name a registry exposes, with its metric family's name."""
    names: dict[str, str] = {}
    for family in registry.collect():
        for suffix in SUFFIXES.get(family.type, ("",)):
            names[family.name + suffix] = family.name
    return names


def registered_series() -> dict[str, str]:
    from inference_gpu.metrics import NodeMetrics
    from serval_api.metrics import ApiMetrics

    return {**exported_series(ApiMetrics().registry), **exported_series(NodeMetrics().registry)}


def all_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def test_grafana_dashboard() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"

    panels = list(all_panels(dashboard["panels"]))
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(ids)}"

    series = registered_series()
    used: set[str] = set()
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(re.findall(r"\bserval_[a-z0-9_]+", target["expr"]))
            assert names, f"{panel['title']}: {target['expr']}"
            unknown = names - series.keys()
            assert not unknown, f"{panel['title']}: no such metric {sorted(unknown)}"
            used |= {series[name] for name in names}
    unused = set(series.values()) - used
    assert not unused, f"metrics on no panel: {sorted(unused)}"


# ---- repository paths named in the docs and in docstrings and comments ------------------------

TOP_LEVEL = sorted(
    p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".") and "." not in p.name
)
"""The repository's top-level folders (`serval_api`, `tests`, `docker`, …): a token starting with one
of them and a `/` names a repository path."""
PACKAGES = ["serval_common", "serval_api", "inference_gpu", "build_jobs", "serval_cli", "bench"]
"""The project's packages (mypy's list): their docstrings and comments are checked, and dotted names
such as `serval_api.service.translation` starting with one of them name a module."""
PATH_SOURCES = sorted(
    [ROOT / "README.md", ROOT / "bench" / "README.md", ROOT / "tests" / "README.md", *DOCS.glob("*.md")]
)
REPO_PATH = re.compile(
    rf"(?<![\w./\-@:])(?:{'|'.join(map(re.escape, TOP_LEVEL))})/[\w.\-/*…{{}}<>]*(?:::?\w+)?"
)
DOTTED_MODULE = re.compile(rf"(?<![\w./\-])(?:{'|'.join(p for p in PACKAGES if p != 'bench')})(?:\.\w+)+")
"""`bench.` is left out: benchmarks name gRPC services such as `bench.Echo`, and no docs name their modules."""
OUTPUTS = tuple(
    line.strip()
    for line in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    if line.strip().endswith("/") and "/" in line.strip()[:-1]
)
"""Ignored folders such as `bench/results/`: what is named in them is written by a run, not kept."""
MADE_BY_USERS = {"deploy/.env"}
"""Files the docs tell the reader to create (`cp deploy/serval.env.example deploy/.env`)."""


def _path_exists(token: str) -> bool:
    """Whether a path token names something in the repository: `a/b.py`, `a/b.py:symbol` or
    `a/b.py::test` (the file), `a/b/` (a folder), `a/*.py` (a glob matching something), `a/b/…`
    or `a/{id}/x` (the part before the placeholder)."""
    path = re.sub(r"::?\w+$", "", token).rstrip(".")
    if f"{path.rstrip('/')}/".startswith(OUTPUTS) or path in MADE_BY_USERS:
        return True
    for cut in ("…", "...", "{", "<"):
        if cut in path:
            path = path[: path.index(cut)].rpartition("/")[0]
    if "*" in path:
        return any(ROOT.glob(path.rstrip("/")))
    return (ROOT / path).exists()


def _module_exists(dotted: str) -> bool:
    """Whether a dotted name resolves: its longest prefix that is a module or package, and the next
    name after it (an attribute, a class, a function) named in that module's source."""
    parts = dotted.rstrip(".").split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        for source in (base.with_suffix(".py"), base / "__init__.py"):
            if source.is_file():
                rest = parts[end:]
                return (
                    not rest or re.search(rf"\b{re.escape(rest[0])}\b", source.read_text("utf-8")) is not None
                )
        if base.is_dir():
            return end == len(parts)
    return False


DOCSTRING_OR_COMMENT = re.compile(r'"""(.*?)"""|#([^\n]*)', re.DOTALL)


def docstrings_and_comments(path: Path) -> str:
    """A Python file's triple-quoted strings (its docstrings) and comments, one a line: a regex
    rather than `ast` and `tokenize`, which take seconds over every package."""
    source = path.read_text(encoding="utf-8")
    return "\n".join(doc or comment for doc, comment in DOCSTRING_OR_COMMENT.findall(source))


def missing_paths() -> list[str]:
    texts = [(_id(path), path.read_text(encoding="utf-8")) for path in PATH_SOURCES if path.exists()]
    texts += [
        (_id(path), docstrings_and_comments(path))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    ]
    missing = []
    for where, text in texts:
        missing += [f"{where}: {token}" for token in REPO_PATH.findall(text) if not _path_exists(token)]
        missing += [f"{where}: {name}" for name in DOTTED_MODULE.findall(text) if not _module_exists(name)]
    return sorted(set(missing))


def test_named_repository_paths_exist() -> None:
    """Every repository path (`serval_api/service/translation.py`, `tests/…::test`, `docker/…`) and
    dotted module (`serval_api.service.translation`) named in the docs or in the packages' docstrings
    and comments exists: a module that moves takes its mentions along."""
    missing = missing_paths()
    assert not missing, "named but not in the repository:\n" + "\n".join(missing)
