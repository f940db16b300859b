"""How the house stands: long modules, import cycles, arrows that point the wrong way, and code that
compares engine-family names.

    python scripts/house.py            the lists, for a closing note or a review
    python scripts/house.py --json     the same as JSON

Import cycles are counted over every import in the project's own packages, including those inside
functions (a lazy import hides a cycle from the interpreter, not from a reader); imports under
`if TYPE_CHECKING:` are left out (the type checker's only). Type-only cycles are the further cycles
those imports close: no failure at run time, but still two modules that cannot be read apart.

Imports across components and arrows up inside the API service count every import, type-only ones
included. The components are the top-level packages: each may import `serval_common`, which imports
none of them, and `serval_cli` (the `serval` command, which starts each of them) may import all
three; any other import between two of them is
listed. Inside `serval_api` the database layer imports no layer above it, and the service layer
neither the adapters that call it (REST, gRPC, web) nor the job launchers that implement its ports.

A family comparison is an `==`, `!=` or `in` whose one side is a family's name as a string literal
or an `EngineType` member, a set of them, or a table keyed by them: the places that should ask the
family registry instead.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("serval_api", "serval_common", "inference_gpu", "build_jobs", "serval_cli")
LONG_LINES = 400
FAMILY_NAMES = frozenset({"nmt", "smt-transfer", "smttransfer", "statistical", "echo", "echo-word-alignment"})
SHARED_COMPONENT = "serval_common"
ALLOWED_COMPONENT_IMPORTS = frozenset(
    {("serval_cli", "serval_api"), ("serval_cli", "inference_gpu"), ("serval_cli", "build_jobs")}
)
"""(importer, imported) pairs of components allowed besides every component importing `serval_common`."""
LAYERS_ABOVE = {
    "serval_api.db": (
        "serval_api.routing",
        "serval_api.service",
        "serval_api.rest",
        "serval_api.grpc",
        "serval_api.builds",
    ),
    "serval_api.service": ("serval_api.rest", "serval_api.grpc", "serval_api.builds", "serval_api.web"),
}
"""A layer of the API service → the packages it must not import."""


@dataclass(frozen=True)
class FamilyComparison:
    module: str
    line: int
    text: str


@dataclass(frozen=True)
class Import:
    """One import of a project module: the module it names, on which line, and whether only the
    type checker reads it."""

    target: str
    line: int
    typing_only: bool


@dataclass(frozen=True)
class Arrow:
    """An import that points where it must not (`module` line `line` imports `imports`)."""

    module: str
    line: int
    imports: str


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def long_modules(found: dict[str, Path]) -> list[tuple[str, int]]:
    sizes = [(name, len(path.read_text().splitlines())) for name, path in found.items()]
    return sorted(((n, s) for n, s in sizes if s > LONG_LINES), key=lambda item: -item[1])


def _imports(name: str, path: Path, found: dict[str, Path]) -> list[Import]:
    """The project modules that `name` imports, each with its first line (a runtime import
    before a type-only one)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    named: list[tuple[str, int, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named.extend((alias.name, node.lineno, id(node) in typing_only) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # `from pkg import mod` imports the module pkg.mod when there is one
                target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in found else base
                named.append((target, node.lineno, id(node) in typing_only))
    resolved: dict[str, Import] = {}
    for target, line, only_typing in sorted(named, key=lambda n: (n[2], n[1])):
        while target and target not in found:
            target = target.rpartition(".")[0]
        if target and target != name and target not in resolved:
            resolved[target] = Import(target, line, only_typing)
    return sorted(resolved.values(), key=lambda i: (i.line, i.target))


def import_graph(found: dict[str, Path]) -> dict[str, list[Import]]:
    return {name: _imports(name, path, found) for name, path in found.items()}


def import_cycles(
    found: dict[str, Path], imports: dict[str, list[Import]], *, typing_only: bool = False
) -> list[list[str]]:
    """Strongly connected groups of modules (Tarjan), package `__init__` re-exports left out:
    a package importing its own submodules to re-export them is not a cycle a reader trips on.
    Over runtime imports; with `typing_only`, the groups that type-only imports add or widen."""
    groups = _strongly_connected(_edges(found, imports, typing=False))
    if not typing_only:
        return groups
    at_run_time = {tuple(group) for group in groups}
    return [
        g for g in _strongly_connected(_edges(found, imports, typing=True)) if tuple(g) not in at_run_time
    ]


def _edges(found: dict[str, Path], imports: dict[str, list[Import]], *, typing: bool) -> dict[str, set[str]]:
    graph = {
        name: {i.target for i in named if typing or not i.typing_only} for name, named in imports.items()
    }
    for name, path in found.items():
        if path.name == "__init__.py":
            graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(groups)


def component_imports(imports: dict[str, list[Import]]) -> list[Arrow]:
    """Imports from one component (top-level package) into another that the rules do not allow."""
    arrows: list[Arrow] = []
    for name, found in imports.items():
        importer = name.partition(".")[0]
        for i in found:
            imported = i.target.partition(".")[0]
            if imported in (importer, SHARED_COMPONENT) or (importer, imported) in ALLOWED_COMPONENT_IMPORTS:
                continue
            arrows.append(Arrow(name, i.line, i.target))
    return sorted(arrows, key=lambda a: (a.module, a.line, a.imports))


def layer_arrows(imports: dict[str, list[Import]]) -> list[Arrow]:
    """Imports from a layer of the API service into a package above it (`LAYERS_ABOVE`)."""
    arrows: list[Arrow] = []
    for name, found in imports.items():
        for layer, above in LAYERS_ABOVE.items():
            if name != layer and not name.startswith(layer + "."):
                continue
            arrows.extend(
                Arrow(name, i.line, i.target)
                for i in found
                if any(i.target == up or i.target.startswith(up + ".") for up in above)
            )
    return sorted(arrows, key=lambda a: (a.module, a.line, a.imports))


def _names_a_family(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant) and node.value in FAMILY_NAMES:
        return True
    if isinstance(node, ast.Attribute):
        inner = node.value
        if node.attr == "value" and isinstance(inner, ast.Attribute):
            return _names_a_family(inner)  # EngineType.NMT.value
        return isinstance(inner, ast.Name) and inner.id == "EngineType"
    if isinstance(node, (ast.Tuple, ast.Set, ast.List)):
        return any(_names_a_family(e) for e in node.elts)
    return False


def family_comparisons(found: dict[str, Path]) -> list[FamilyComparison]:
    hits: list[FamilyComparison] = []
    for name, path in found.items():
        if name.startswith("serval_common.families"):
            continue  # the registry itself
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
            ):
                if any(_names_a_family(side) for side in [node.left, *node.comparators]):
                    hits.append(FamilyComparison(name, node.lineno, lines[node.lineno - 1].strip()))
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in {"frozenset", "set"}:
                if node.args and _names_a_family(node.args[0]):
                    hits.append(FamilyComparison(name, node.lineno, lines[node.lineno - 1].strip()))
            elif isinstance(node, ast.Dict) and any(k is not None and _names_a_family(k) for k in node.keys):
                hits.append(FamilyComparison(name, node.lineno, lines[node.lineno - 1].strip()))
    return sorted(hits, key=lambda h: (h.module, h.line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    found = modules()
    imports = import_graph(found)
    long = long_modules(found)
    cycles = {
        "import cycles": import_cycles(found, imports),
        "type-only import cycles": import_cycles(found, imports, typing_only=True),
    }
    arrows = {
        "imports across components": component_imports(imports),
        "arrows up inside serval_api": layer_arrows(imports),
    }
    hits = family_comparisons(found)
    if args.json:
        report = {
            "long_modules": long,
            "import_cycles": cycles["import cycles"],
            "type_only_import_cycles": cycles["type-only import cycles"],
            "component_imports": [asdict(a) for a in arrows["imports across components"]],
            "layer_arrows": [asdict(a) for a in arrows["arrows up inside serval_api"]],
            "family_comparisons": [asdict(h) for h in hits],
        }
        print(json.dumps(report, indent=2))
        return
    print(f"modules over {LONG_LINES} lines: {len(long)}")
    for name, size in long:
        print(f"  {size:5d}  {name}")
    for title, groups in cycles.items():
        print(f"{title}: {len(groups)}")
        for group in groups:
            print("  " + " <-> ".join(group))
    for title, found_arrows in arrows.items():
        print(f"{title}: {len(found_arrows)}")
        for arrow in found_arrows:
            print(f"  {arrow.module}:{arrow.line}  -> {arrow.imports}")
    print(f"places comparing family names: {len(hits)}")
    for hit in hits:
        print(f"  {hit.module}:{hit.line}  {hit.text}")


if __name__ == "__main__":
    main()
