"""The engine-family registry: one declaration per engine type, which every component reads."""

from __future__ import annotations

import importlib
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from build_jobs.template import FamilyBuildJob, job_class
from inference_gpu.families import ServedModel, available_families, model_class
from serval.inference.v1 import node_pb2
from serval_api.db.models import EngineType
from serval_common import families
from serval_common.build_options import JobOptions
from serval_common.families import (
    ECHO_WORD_ALIGNMENT,
    NMT,
    SMT_TRANSFER,
    STATISTICAL,
    EngineFamily,
    Kind,
    Operation,
    UnknownFamily,
)
from serval_common.word_graph_guard import primary_source

ROOT = Path(__file__).resolve().parents[1]


def test_every_engine_type_has_one_family_and_every_family_an_engine_type() -> None:
    assert {f.name for f in families.families()} == {t.value for t in EngineType}
    for engine_type in EngineType:
        assert engine_type.family is families.family(engine_type.value)


def test_the_kinds_split_serval_s_two_apis() -> None:
    assert families.names(Kind.TRANSLATION) == {"nmt", "smt-transfer", "echo"}
    assert families.names(Kind.WORD_ALIGNMENT) == {"statistical", "echo-word-alignment"}
    assert families.names(where=lambda f: f.learns) == {"smt-transfer"}
    assert families.names(where=lambda f: f.served_here) == {"echo", "echo-word-alignment"}
    assert EngineType.STATISTICAL.is_word_alignment and not EngineType.NMT.is_word_alignment
    assert EngineType.ECHO.is_echo and not EngineType.SMT_TRANSFER.is_echo
    assert all(f.answers(Operation.ALIGN) for f in families.families() if f.kind is Kind.WORD_ALIGNMENT)
    assert not NMT.answers(Operation.ALIGN) and NMT.answers(Operation.WORD_GRAPH)


def test_an_unknown_name_backend_or_wire_value_is_refused_or_ignored() -> None:
    with pytest.raises(UnknownFamily, match="unknown engine type 'llm'"):
        families.family("llm")
    with pytest.raises(UnknownFamily, match="unknown model backend"):
        families.of_backend("onnx")
    assert families.of_wire(node_pb2.ENGINE_FAMILY_UNSPECIFIED) is None
    assert families.of_wire(999) is None


def test_the_node_protocol_values_and_backends_are_the_families() -> None:
    wire_names = {v.number: v.name for v in node_pb2.EngineFamily.DESCRIPTOR.values if v.number}
    served = [f for f in families.families() if f.wire]
    assert {f.wire for f in served} == set(wire_names), "every node protocol family is declared once"
    for f in served:
        assert wire_names[f.wire] == "ENGINE_FAMILY_" + f.name.upper().replace("-", "_")
        assert families.of_wire(f.wire) is f
        assert f.backend is not None and families.of_backend(f.backend) is f


def test_each_family_names_its_build_job_options_and_node_model() -> None:
    for f in families.families():
        assert issubclass(f.options, JobOptions), f"{f.name}'s options share what every job takes"
        if f.job is not None:
            assert issubclass(job_class(f), FamilyBuildJob), f"{f.name}'s build job {f.job}"
        if f.node_model is not None:
            module, _, name = f.node_model.partition(":")
            assert importlib.util.find_spec(module) is not None
            if f.name in available_families():
                cls = model_class(f.backend or "")
                assert issubclass(cls, ServedModel) and cls.__name__ == name
    assert SMT_TRANSFER.options is not NMT.options and STATISTICAL.options is not NMT.options
    assert "base_model" in NMT.options.model_fields and NMT.takes_base_model


def test_a_model_that_learns_per_engine_never_shares_its_weights() -> None:
    from serval_common.manifest import Manifest, ResolvedRevision

    smt = Manifest(kind="model-revision", backend=SMT_TRANSFER.backend or "")
    assert ResolvedRevision("models/a/1", smt, "models/a/1", smt).weights == "models/a/1"


def test_primary_source_reads_the_family_by_either_spelling() -> None:
    assert primary_source("smt-transfer").name == "SMT"
    assert primary_source("SmtTransfer").name == "SMT"
    assert primary_source("nmt").name == "NMT"
    assert primary_source("something-else").name == "NMT"


def test_registering_twice_or_sharing_a_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        families.register(replace(NMT, learns=True))
    with pytest.raises(ValueError, match="belongs to two families"):
        families.register(replace(NMT, name="nmt-copy"))
    assert families.register(NMT) is NMT, "registering the same declaration again changes nothing"


def test_a_new_family_is_one_declaration() -> None:
    """What adding, say, an LLM drafting family takes: one `register` call; the registry then
    answers for it like any other (here in a child process, so the suite's registry stays as is)."""
    script = """
from serval_common import families
from serval_common.build_options import NmtBuildOptions
from serval_common.families import EngineFamily, Kind, Operation
families.register(EngineFamily(name="llm-draft", kind=Kind.TRANSLATION, options=NmtBuildOptions,
    job=None, backend="llm", operations=frozenset({Operation.TRANSLATE}), pretranslates=True))
f = families.of_backend("llm")
print(f.name, sorted(families.names(Kind.TRANSLATION)), f.answers(Operation.WORD_GRAPH))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.split() == [
        "llm-draft",
        "['echo',",
        "'llm-draft',",
        "'nmt',",
        "'smt-transfer']",
        "False",
    ]
    assert isinstance(NMT, EngineFamily)


def test_the_project_has_no_import_cycles_and_compares_no_family_names_outside_the_registry() -> None:
    import json

    out = subprocess.run(
        [sys.executable, "scripts/house.py", "--json"], capture_output=True, text=True, check=True, cwd=ROOT
    )
    report = json.loads(out.stdout)
    assert report["import_cycles"] == []
    assert report["type_only_import_cycles"] == []
    assert report["layer_arrows"] == [], "the database and service layers import nothing above them"
    assert report["component_imports"] == [], (
        "the API service, the build jobs and the nodes import only serval_common of one another"
    )
    places = [h["module"] for h in report["family_comparisons"]]
    assert places == [], "ask serval_common.families instead"


def test_house_lists_type_only_cycles_and_arrows_that_point_the_wrong_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's own rules, on a made-up project: a cycle closed by a TYPE_CHECKING import,
    a component importing another, and the database layer importing the routing layer."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("house", ROOT / "scripts" / "house.py")
    assert spec is not None and spec.loader is not None
    house = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "house", house)  # its dataclasses look their module up
    spec.loader.exec_module(house)
    files = {
        "serval_common/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from serval_common import b\n",
        "serval_common/b.py": "from serval_common import a\n",
        "serval_api/db/nodes.py": "from serval_api.routing.session import NodeSession\nimport serval_common.a\n",
        "serval_api/routing/session.py": "",
        "build_jobs/evaluate.py": "from inference_gpu.nllb import codes\n",
        "inference_gpu/nllb.py": "",
        "serval_cli/main.py": "import serval_api.db.nodes\n",
    }
    found = {}
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        found[relative.removesuffix(".py").replace("/", ".")] = path
    imports = house.import_graph(found)
    assert house.import_cycles(found, imports) == []
    assert house.import_cycles(found, imports, typing_only=True) == [["serval_common.a", "serval_common.b"]]
    assert house.component_imports(imports) == [house.Arrow("build_jobs.evaluate", 1, "inference_gpu.nllb")]
    assert house.layer_arrows(imports) == [
        house.Arrow("serval_api.db.nodes", 1, "serval_api.routing.session")
    ]


def test_an_engine_type_is_read_in_any_of_its_spellings() -> None:
    for spelling in ("smt-transfer", "SmtTransfer", "smt_transfer", " SMTTRANSFER "):
        assert families.of_spelling(spelling) is SMT_TRANSFER
    assert families.of_spelling("EchoWordAlignment") is ECHO_WORD_ALIGNMENT
    assert families.of_spelling("something-else") is None
