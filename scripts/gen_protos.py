"""Generate the Python modules for every .proto under protos/ into the package `serval/`.

Run `python scripts/gen_protos.py` after editing a .proto; `--check` regenerates into a
temporary folder and fails if the committed code differs (CI runs it).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
OUT = ROOT


def generate(out: Path) -> None:
    files = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    out.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{PROTOS}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *files,
    ]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")
    for folder in [out / "serval", *(p for p in (out / "serval").rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()
    (out / "serval" / "__init__.py").write_text(
        '"""Generated from protos/ by scripts/gen_protos.py (`make protos`): never edit by hand."""\n'
    )
    (out / "serval" / "py.typed").touch()


def differences(a: Path, b: Path) -> list[str]:
    names_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    names_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    diff = sorted(str(n) for n in names_a ^ names_b)
    diff += sorted(str(n) for n in names_a & names_b if not filecmp.cmp(a / n, b / n, shallow=False))
    return diff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if serval/ is stale or missing")
    args = parser.parse_args()
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            stale = (
                differences(Path(tmp) / "serval", OUT / "serval")
                if (OUT / "serval").exists()
                else ["serval/"]
            )
        if stale:
            sys.exit("generated protobuf code is stale; run `make protos`:\n  " + "\n  ".join(stale))
        print("generated protobuf code is current")
        return
    shutil.rmtree(OUT / "serval", ignore_errors=True)
    generate(OUT)
    print(f"generated {OUT / 'serval'}")


if __name__ == "__main__":
    main()
