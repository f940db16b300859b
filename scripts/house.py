"""How the house stands: long modules, import cycles, and code that compares engine-family names.

    python scripts/house.py            the three lists, for a closing note or a review
    python scripts/house.py --json     the same as JSON

Import cycles are counted over every import in the project's own packages, including those inside
functions (a lazy import hides a cycle from the interpreter, not from a reader); imports under
`if TYPE_CHECKING:` are left out (the type checker's only). A family
comparison is an `==`, `!=` or `in` whose one side is a family's name as a string literal or an
`EngineType` member, a set of them, or a table keyed by them: the places that should ask the family
registry instead.
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


@dataclass(frozen=True)
class FamilyComparison:
    module: str
    line: int
    text: str


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


def _imports(name: str, path: Path, found: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for stmt in node.body
        for inner in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue  # read by the type checker only: no cycle at run time
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # `from pkg import mod` imports the module pkg.mod when there is one
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in found else base)
    resolved = set()
    for target in targets:
        while target and target not in found:
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def import_cycles(found: dict[str, Path]) -> list[list[str]]:
    """Strongly connected groups of modules (Tarjan), package `__init__` re-exports left out:
    a package importing its own submodules to re-export them is not a cycle a reader trips on."""
    graph = {name: _imports(name, path, found) for name, path in found.items()}
    for name, path in found.items():
        if path.name == "__init__.py":
            graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
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
    report = {
        "long_modules": long_modules(found),
        "import_cycles": import_cycles(found),
        "family_comparisons": [asdict(h) for h in family_comparisons(found)],
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"modules over {LONG_LINES} lines: {len(report['long_modules'])}")
    for name, size in report["long_modules"]:
        print(f"  {size:5d}  {name}")
    print(f"import cycles: {len(report['import_cycles'])}")
    for group in report["import_cycles"]:
        print("  " + " <-> ".join(group))
    print(f"places comparing family names: {len(report['family_comparisons'])}")
    for hit in report["family_comparisons"]:
        print(f"  {hit['module']}:{hit['line']}  {hit['text']}")


if __name__ == "__main__":
    main()
