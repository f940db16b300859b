"""A `statistical` build end to end: `run_build` trains a real Thot aligner on verse pairs from a
real local model store, aligns every row of `word-align.json` (more than 1,024 of them), streams
them over real gRPC to a platform server this test runs (it records what it receives), and
publishes the model folder."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2

from build_jobs.job import run_build
from serval.translation.v1 import platform_pb2, platform_pb2_grpc
from serval.word_alignment.v1 import platform_pb2 as wa_platform_pb2
from serval.word_alignment.v1 import platform_pb2_grpc as wa_platform_pb2_grpc
from serval_common.alignment_build_options import AlignmentBuildOptions
from serval_common.build_options import BuildOptionsError
from serval_common.families import STATISTICAL
from serval_common.jobs import CANCELED_EXIT_CODE, WORD_ALIGN_INPUT, JobSpec
from serval_common.manifest import fetch_folder, read_manifest
from serval_common.settings import JobSettings, Settings
from serval_common.store import ModelStore, open_store
from serval_common.thot_alignment import SETTINGS_FILE, read_settings
from tests.helpers import verse_pairs

TOKEN = "job-token-1"
TRAIN_PAIRS = 300
ALIGN_ROWS = 1100
"""More than machine.py's 1,024-input cut."""


@dataclass
class Platform:
    """Both platform services, recording every call; `on_status` may act on a status report."""

    statuses: list[platform_pb2.UpdateBuildStatusRequest] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    completed: list[platform_pb2.BuildCompletedRequest] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    alignments: list[wa_platform_pb2.InsertWordAlignmentsRequest] = field(default_factory=list)
    streams: int = 0
    execution: list[wa_platform_pb2.ExecutionData] = field(default_factory=list)
    translation_execution: list[platform_pb2.ExecutionData] = field(default_factory=list)
    refused: int = 0
    on_status: Callable[[platform_pb2.UpdateBuildStatusRequest], None] | None = None

    def authorized(self, context: grpc.ServicerContext) -> None:
        if ("authorization", f"Bearer {TOKEN}") not in tuple(context.invocation_metadata()):
            self.refused += 1
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad job token")


class TranslationPlatform(platform_pb2_grpc.TranslationPlatformApiServicer):
    def __init__(self, platform: Platform) -> None:
        self.p = platform

    def BuildStarted(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self.p.authorized(context)
        self.p.events.append("started")
        return empty_pb2.Empty()

    def UpdateBuildStatus(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self.p.authorized(context)
        self.p.statuses.append(request)
        if self.p.on_status is not None:
            self.p.on_status(request)
        return empty_pb2.Empty()

    def BuildCompleted(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self.p.authorized(context)
        self.p.events.append("completed")
        self.p.completed.append(request)
        return empty_pb2.Empty()

    def BuildCanceled(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self.p.authorized(context)
        self.p.events.append("canceled")
        return empty_pb2.Empty()

    def BuildFaulted(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self.p.authorized(context)
        self.p.events.append("faulted")
        self.p.faults.append(request.message)
        return empty_pb2.Empty()

    def UpdateBuildExecutionData(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self.p.authorized(context)
        self.p.events.append("translation execution data")
        self.p.translation_execution.append(request.execution_data)
        return empty_pb2.Empty()


class WordAlignmentPlatform(wa_platform_pb2_grpc.WordAlignmentPlatformApiServicer):
    def __init__(self, platform: Platform) -> None:
        self.p = platform

    def InsertWordAlignments(self, request_iterator: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self.p.authorized(context)
        self.p.streams += 1
        self.p.alignments.extend(request_iterator)
        return empty_pb2.Empty()

    def UpdateBuildExecutionData(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        self.p.authorized(context)
        self.p.events.append("execution data")
        self.p.execution.append(request.execution_data)
        return empty_pb2.Empty()


class WordAlignmentPlatformWithoutExecutionData(WordAlignmentPlatform):
    """An API service whose word-alignment platform lacks UpdateBuildExecutionData."""

    def UpdateBuildExecutionData(self, request: Any, context: grpc.ServicerContext) -> empty_pb2.Empty:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")


@contextmanager
def serving(
    recorder: Platform, word_alignment: type[WordAlignmentPlatform] = WordAlignmentPlatform
) -> Iterator[str]:
    """Both platform services on a loopback port; yields the address."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    platform_pb2_grpc.add_TranslationPlatformApiServicer_to_server(TranslationPlatform(recorder), server)
    wa_platform_pb2_grpc.add_WordAlignmentPlatformApiServicer_to_server(word_alignment(recorder), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(None)


@pytest.fixture
def platform() -> Iterator[tuple[Platform, str]]:
    recorder = Platform()
    with serving(recorder) as address:
        yield recorder, address


def align_rows() -> list[dict[str, Any]]:
    sources, targets = verse_pairs("engwebp", "swh1850", ALIGN_ROWS)
    rows: list[dict[str, Any]] = [
        {
            "corpusId": "pc1",
            "textId": "NT",
            "sourceRefs": [f"v{n}"],
            "targetRefs": [f"v{n}"],
            "source": source,
            "target": target,
        }
        for n, (source, target) in enumerate(zip(sources, targets, strict=True))
    ]
    rows[7]["target"] = "   "
    return rows


def export(store: ModelStore, build_id: str, rows: list[dict[str, Any]]) -> None:
    sources, targets = verse_pairs("engwebp", "swh1850", TRAIN_PAIRS)
    store.write_bytes(f"builds/{build_id}/train.src.txt", ("\n".join(sources) + "\n").encode())
    store.write_bytes(f"builds/{build_id}/train.trg.txt", ("\n".join(targets) + "\n").encode())
    store.write_bytes(f"builds/{build_id}/{WORD_ALIGN_INPUT}", json.dumps(rows).encode())


def spec(build_id: str, address: str, options: dict[str, Any]) -> JobSpec:
    return JobSpec(
        build_id=build_id,
        engine_id="e1",
        source_language="en",
        target_language="sw",
        revision=1,
        train=True,
        options_json=json.dumps(options),
        store_url="unused",
        api_address=address,
        job_token=TOKEN,
        engine_type="statistical",
    )


def settings(tmp: Path) -> Settings:
    return Settings(home=tmp, jobs=JobSettings(report_retry_s=5))


@dataclass(frozen=True)
class Built:
    platform: Platform
    store: ModelStore
    code: int
    rows: list[dict[str, Any]]
    home: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """One build for the module: the default aligner (eflomal, 4 iterations a stage to be quick)
    on 300 training pairs (`maxSegments`), 1,100 rows plus a malformed one."""
    tmp = tmp_path_factory.mktemp("align-job")
    store = open_store((tmp / "store").as_uri())
    rows = align_rows()
    export(store, "b1", [*rows, {"corpusId": "pc1", "textId": "NT", "sourceRefs": ["x"], "target": "y"}])
    recorder = Platform()
    with serving(recorder) as address:
        code = run_build(
            spec("b1", address, {"maxSegments": TRAIN_PAIRS, "iterations": 4}),
            settings(tmp),
            threading.Event(),
            store=store,
        )
    yield Built(recorder, store, code, rows, tmp)


def test_the_build_completes_in_order(built: Built) -> None:
    assert built.code == 0, built.platform.faults
    assert built.platform.refused == 0
    assert built.platform.events[0] == "started"
    assert built.platform.events[-2:] == ["execution data", "completed"]
    completed = built.platform.completed[0]
    assert completed.corpus_size == TRAIN_PAIRS, "maxSegments caps the pairs trained on"
    assert 0 < completed.confidence <= 100, "the direction agreement in percent"
    stages = {phase.stage for status in built.platform.statuses for phase in status.phases}
    assert stages == {platform_pb2.PHASE_STAGE_TRAIN, platform_pb2.PHASE_STAGE_INFERENCE}
    assert built.platform.statuses[-1].message.startswith(
        "published revision 1: eflomal aligner trained on 300"
    )


def test_every_row_is_aligned_streamed_and_counted(built: Built) -> None:
    got = built.platform.alignments
    assert built.platform.streams == 1
    assert len(got) == ALIGN_ROWS
    assert [r.source_refs[0] for r in got] == [r["sourceRefs"][0] for r in built.rows], "every row, in order"
    assert all(r.engine_id == "e1" and r.corpus_id == "pc1" and r.text_id == "NT" for r in got)
    for row in got:
        for link in row.alignment:
            assert 0 <= link.source_index < len(row.source_tokens)
            assert 0 <= link.target_index < len(row.target_tokens)
            assert 0.0 <= link.score <= 1.0
    assert sum(1 for r in got if r.alignment) == ALIGN_ROWS - 1, (
        "only the row without target words has no links"
    )
    assert got[7].source_tokens and not got[7].target_tokens and not got[7].alignment
    # rows past the 300 trained on are aligned too: the words of row 1,050 that have a
    # translation probability come from the model, not from a fallback
    assert got[1050].alignment and max(link.score for link in got[1050].alignment) > 0.1

    data = built.platform.execution[0]
    assert data.word_align_count == ALIGN_ROWS
    assert data.train_count == TRAIN_PAIRS
    assert (data.engine_source_language_tag, data.engine_target_language_tag) == ("en", "sw")
    assert any("1 of 1101 rows to align were malformed" in w for w in data.warnings), data.warnings
    assert any("1 of 1101 rows have no words on one side" in w for w in data.warnings), data.warnings


def linked(row: wa_platform_pb2.InsertWordAlignmentsRequest) -> set[tuple[str, str]]:
    return {(row.source_tokens[k.source_index], row.target_tokens[k.target_index]) for k in row.alignment}


def test_names_align_with_high_scores(built: Built) -> None:
    first = built.platform.alignments[0]  # MAT 1:1, "… Jesus Christ, the son of David, the son of Abraham."
    assert {("Jesus", "Yesu"), ("Christ", "Kristo"), ("David", "Daudi"), ("Abraham", "Abrahamu")} <= linked(
        first
    )
    scores = {
        (first.source_tokens[k.source_index], first.target_tokens[k.target_index]): k.score
        for k in first.alignment
    }
    assert scores[("Jesus", "Yesu")] > 0.5
    second = built.platform.alignments[1]  # "Abraham became the father of Isaac. Isaac …"
    assert ("Abraham", "Abrahamu") in linked(second)


def test_the_revision_is_published_with_its_settings(built: Built, tmp_path: Path) -> None:
    manifest = read_manifest(built.store, "models/e1/1")
    assert manifest.backend == "thot-align" and manifest.build_id == "b1"
    paths = {f.path for f in manifest.files}
    assert {SETTINGS_FILE, "src_trg.src", "trg_src.src"} <= paths
    assert 0 < manifest.scores["direction_agreement"] <= 1
    _, folder = fetch_folder(built.store, "models/e1/1", tmp_path / "cache")
    settings = read_settings(folder)
    assert (settings.model_type, settings.heuristic, settings.lowercase) == (
        "eflomal",
        "grow-diag-final-and",
        True,
    )
    assert settings.iterations == 4
    assert settings.train_pairs == TRAIN_PAIRS


def test_a_cancel_during_training_publishes_nothing(platform: tuple[Platform, str], tmp_path: Path) -> None:
    recorder, address = platform
    store = open_store((tmp_path / "store").as_uri())
    export(store, "b2", align_rows()[:50])
    canceled = threading.Event()

    def cancel_while_training(status: platform_pb2.UpdateBuildStatusRequest) -> None:
        if any(p.stage == platform_pb2.PHASE_STAGE_TRAIN for p in status.phases):
            canceled.set()

    recorder.on_status = cancel_while_training
    code = run_build(spec("b2", address, {}), settings(tmp_path), canceled, store=store)

    assert code == CANCELED_EXIT_CODE
    assert recorder.events[-1] == "canceled"
    assert recorder.alignments == [] and recorder.completed == []
    assert store.list_keys("models") == []


def test_bad_options_fault_the_build(platform: tuple[Platform, str], tmp_path: Path) -> None:
    recorder, address = platform
    store = open_store((tmp_path / "store").as_uri())
    export(store, "b3", align_rows()[:5])

    code = run_build(
        spec("b3", address, {"modelType": "giza"}), settings(tmp_path), threading.Event(), store=store
    )

    assert code == 1
    assert recorder.events[-1] == "faulted"
    assert "modelType" in recorder.faults[0]
    assert store.list_keys("models") == []


def test_without_the_word_alignment_execution_data_call_the_count_goes_to_the_translation_one(
    tmp_path: Path,
) -> None:
    recorder = Platform()
    store = open_store((tmp_path / "store").as_uri())
    export(store, "b4", align_rows()[:40])
    with serving(recorder, WordAlignmentPlatformWithoutExecutionData) as address:
        code = run_build(
            spec("b4", address, {"modelType": "fast_align"}),
            settings(tmp_path),
            threading.Event(),
            store=store,
        )

    assert code == 0, recorder.faults
    assert recorder.events[-2:] == ["translation execution data", "completed"]
    data = recorder.translation_execution[0]
    assert (data.train_count, data.pretranslate_count) == (TRAIN_PAIRS, 40)
    assert len(recorder.alignments) == 40


def test_build_options_take_serval_style_names_and_refuse_bad_values() -> None:
    options = STATISTICAL.options.parse(
        '{"modelType": "hmm", "symmetrizationHeuristic": "intersection", "iterations": 3, "maxSegments": 9}'
    )
    assert isinstance(options, AlignmentBuildOptions)
    assert (
        options.model_type,
        options.symmetrization_heuristic,
        options.iterations,
        options.max_segments,
    ) == (
        "hmm",
        "intersection",
        3,
        9,
    )
    defaults = AlignmentBuildOptions.parse("{}")
    assert (defaults.model_type, defaults.symmetrization_heuristic, defaults.lowercase) == (
        "eflomal",
        "grow-diag-final-and",
        True,
    )
    for bad in (
        '{"maxSegments": 0}',
        '{"iterations": 1000}',
        '{"symmetrizationHeuristic": 1}',
    ):
        with pytest.raises(BuildOptionsError, match="invalid build options"):
            AlignmentBuildOptions.parse(bad)
    assert AlignmentBuildOptions.parse('{"baseModel": "x"}') == defaults, "nmt's option: ignored here"
    assert AlignmentBuildOptions.ignored_keys({"baseModel": "x", "lowercase": True}) == ["baseModel"]
