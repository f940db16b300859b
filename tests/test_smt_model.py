"""The `smt-transfer` family on the node: a real Thot model trained here on 300 English→Swahili
verse pairs, published to a real local model store, loaded by a real `InferenceNode`'s model
manager (which replays the engine's trained segments from a real gRPC `GetTrainSegments` server),
and driven through translate, n-best, prefix, word graph (also through sil-machine's
`InteractiveTranslator`) and train-segment."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from machine.annotations import Range
from machine.tokenization import LatinWordDetokenizer, LatinWordTokenizer
from machine.translation import (
    ErrorCorrectionModel,
    InteractiveTranslator,
    TranslationSources,
    WordAlignmentMatrix,
    WordGraph,
    WordGraphArc,
)

from build_jobs.data import split_corpus
from build_jobs.publish import publish_revision
from build_jobs.smt.train import train_smt
from inference_gpu.families import model_class
from inference_gpu.families.smt import MAX_GRAPH_WORDS, SmtModel, WorkerLost
from inference_gpu.model_manager import SegmentsUnavailable
from inference_gpu.node import InferenceNode
from serval.inference.v1 import node_pb2, node_pb2_grpc
from serval.translation.v1 import engine_pb2
from serval_common.manifest import Manifest
from serval_common.settings import NodeSettings, Settings
from serval_common.smt_build_options import SmtBuildOptions
from serval_common.store import open_store
from tests.helpers import verse_pairs

PAIRS = 300
TOKEN = "node-token"
SRC, TGT = "en", "sw"
SOURCES, TARGETS = verse_pairs("engwebp", "swh1850", PAIRS + 20)
UNSEEN = SOURCES[PAIRS:]
"""Verses the model never trained on."""
LONG = " ".join(SOURCES[PAIRS : PAIRS + 4])
"""Four verses as one segment: a large word graph."""


class TrainSegments(node_pb2_grpc.InferenceNodeApiServicer):
    """The API service's `GetTrainSegments`, as a node sees it: the segments of each model
    location, for the node's token only."""

    def __init__(self) -> None:
        self.segments: dict[str, list[node_pb2.TrainSegmentOp]] = {}
        self.calls: list[str] = []
        self.failing = False

    def GetTrainSegments(
        self, request: node_pb2.GetTrainSegmentsRequest, context: grpc.ServicerContext
    ) -> node_pb2.GetTrainSegmentsResponse:
        self.calls.append(request.model.location)
        if dict(context.invocation_metadata()).get("authorization") != f"Bearer {TOKEN}":
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad node token")
        if self.failing:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "not this node's engine")
        return node_pb2.GetTrainSegmentsResponse(segments=self.segments.get(request.model.location, []))


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as loop:
        yield loop


@pytest.fixture(scope="module")
def segments_server() -> Iterator[tuple[TrainSegments, int]]:
    servicer = TrainSegments()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    node_pb2_grpc.add_InferenceNodeApiServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(None)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = split_corpus(SOURCES[:PAIRS], TARGETS[:PAIRS], eval_share=0.05, seed=0)
    model = tmp_path_factory.mktemp("smt") / "model"
    train_smt(corpus, SmtBuildOptions(), model, phase=lambda _f, _m: None, should_cancel=lambda: False)
    return model


@pytest.fixture(scope="module")
def node(
    tmp_path_factory: pytest.TempPathFactory,
    folder: Path,
    segments_server: tuple[TrainSegments, int],
    runner: asyncio.Runner,
) -> Iterator[InferenceNode]:
    servicer, port = segments_server
    home = tmp_path_factory.mktemp("node")
    settings = Settings(
        home=home,
        node=NodeSettings(
            api_addresses=[f"127.0.0.1:{port}"],
            token=TOKEN,
            device="cpu",
            max_input_tokens=200,
            load_retry_s=1,
            load_retry_initial_s=0.1,
        ),
    )
    store = open_store(settings.resolved_store_url)
    for revision in (1, 2, 3):
        publish_revision(store, manifest(revision), folder)
    first = TARGETS[PAIRS]
    servicer.segments["models/e1/2"] = [
        node_pb2.TrainSegmentOp(source_segment=UNSEEN[0], target_segment=first, sentence_start=True, seq=7)
    ]
    built = InferenceNode(settings)
    yield built
    runner.run(built.models.close())


def manifest(revision: int) -> Manifest:
    return Manifest(
        kind="model-revision",
        backend="thot-smt",
        engine_id="e1",
        revision=revision,
        build_id=f"b{revision}",
        source_language=SRC,
        target_language=TGT,
    )


def ref(revision: int) -> node_pb2.ModelRef:
    return node_pb2.ModelRef(engine_id="e1", revision=revision, location=f"models/e1/{revision}")


@pytest.fixture(scope="module")
def model(node: InferenceNode, runner: asyncio.Runner) -> SmtModel:
    loaded = runner.run(node.models.get(ref(1)))
    assert isinstance(loaded, SmtModel)
    return loaded


def test_the_registry_maps_thot_smt_folders_to_this_family() -> None:
    assert model_class("thot-smt") is SmtModel


def test_translate(model: SmtModel, runner: asyncio.Runner) -> None:
    for segment in UNSEEN[:3]:
        [result] = runner.run(model.translate(segment, 1, SRC, TGT))
        words = list(LatinWordTokenizer().tokenize(segment))
        assert list(result.source_tokens) == words
        count = len(result.target_tokens)
        assert count > 0 and len(result.confidences) == len(result.sources) == count
        assert all(0 <= c <= 1 for c in result.confidences)
        assert result.translation == LatinWordDetokenizer().detokenize(list(result.target_tokens))
        first_word = next(w for w in result.target_tokens if w[0].isalpha())
        assert first_word[0].isupper(), "a segment starts a sentence: its first word is capitalised"
        for pair in result.alignment:
            assert 0 <= pair.source_index < len(words) and 0 <= pair.target_index < count
        cuts = [p.target_segment_cut for p in result.phrases]
        assert cuts == sorted(cuts) and cuts[-1] == count
        covered = sorted(
            i for p in result.phrases for i in range(p.source_segment_start, p.source_segment_end)
        )
        assert covered == list(range(len(words))), "the phrases cover every source word once"


def test_n_best_is_distinct_and_starts_with_the_best(model: SmtModel, runner: asyncio.Runner) -> None:
    segment = UNSEEN[1]
    results = runner.run(model.translate(segment, 4, SRC, TGT))
    [best] = runner.run(model.translate(segment, 1, SRC, TGT))
    assert 1 < len(results) <= 4
    assert len({tuple(w.lower() for w in r.target_tokens) for r in results}) == len(results)
    assert results[0].translation == best.translation


def test_prefix_results_start_with_the_prefix(model: SmtModel, runner: asyncio.Runner) -> None:
    segment = UNSEEN[2]
    [best] = runner.run(model.translate(segment, 1, SRC, TGT))
    words = list(best.target_tokens)
    typed_words = " ".join(words[:2])
    for prefix, expected in [
        (typed_words + " ", words[:2]),
        (typed_words[:-1], words[:2]),
        ("Hapo zamani za kale ", ["Hapo", "zamani", "za", "kale"]),
    ]:
        results = runner.run(model.translate(segment, 3, SRC, TGT, prefix))
        assert results, prefix
        for result in results:
            assert list(result.target_tokens[: len(expected)]) == expected, (prefix, result.translation)
            assert result.translation.startswith(prefix.strip()), (prefix, result.translation)
            assert len(result.target_tokens) > len(expected), "a completion follows the prefix"
            human = [engine_pb2.TRANSLATION_SOURCE_HUMAN]
            assert [list(s.values) for s in result.sources[: len(expected)]] == [human] * len(expected)
        assert len({r.translation for r in results}) == len(results)


def test_a_prefix_off_the_graph_is_corrected_and_continued(model: SmtModel, runner: asyncio.Runner) -> None:
    """A typo'd word the graph does not hold: the error-correcting processor aligns it to the
    graph's word and continues with the graph's words after it, not the best path from scratch."""
    segment = UNSEEN[2]
    [best] = runner.run(model.translate(segment, 1, SRC, TGT))
    words = list(best.target_tokens)
    assert len(words) >= 4
    typo = words[1][:-1] + ("q" if words[1][-1] != "q" else "z") + words[1][-1]
    prefix = f"{words[0]} {typo} "
    results = runner.run(model.translate(segment, 2, SRC, TGT, prefix))
    assert results
    for result in results:
        assert list(result.target_tokens[:2]) == [words[0], typo]
        human = [engine_pb2.TRANSLATION_SOURCE_HUMAN]
        assert [list(s.values) for s in result.sources[:2]] == [human, human]
        count = len(result.target_tokens)
        assert len(result.confidences) == len(result.sources) == count > 2
        for pair in result.alignment:
            assert 0 <= pair.source_index < len(best.source_tokens) and 0 <= pair.target_index < count
        assert result.phrases[-1].target_segment_cut == count
    assert list(results[0].target_tokens[2:4]) == words[2:4], "the graph's words after the corrected one"

    [long] = runner.run(model.translate(LONG, 1, SRC, TGT, "Na kwa hivyo "))
    assert list(long.target_tokens[:3]) == ["Na", "kwa", "hivyo"] and len(long.target_tokens) > 20


def test_graphs_are_cached_per_segment_until_a_segment_is_trained(
    node: InferenceNode, runner: asyncio.Runner
) -> None:
    cached = runner.run(node.models.get(ref(3)))
    assert isinstance(cached, SmtModel)
    segments = list(UNSEEN[10:13])
    for segment in segments:
        runner.run(cached.translate(segment, 1, SRC, TGT, "Na "))
    runner.run(cached.word_graph(segments[0], SRC, TGT))
    assert runner.run(cached.cached_segments()) == [segments[1], segments[2], segments[0]]
    runner.run(cached.train_segment(UNSEEN[13], TARGETS[PAIRS + 13], True, 0))
    assert runner.run(cached.cached_segments()) == []


def paths(graph: engine_pb2.WordGraph) -> int:
    """How many paths lead from state 0 to a final state."""
    count = dict.fromkeys(graph.final_states, 1)
    for arc in reversed(graph.arcs):
        count[arc.prev_state] = count.get(arc.prev_state, 0) + count.get(arc.next_state, 0)
    return count.get(0, 0)


@pytest.mark.parametrize("which", [0, 1, "long"])
def test_word_graph_structure(model: SmtModel, runner: asyncio.Runner, which: Any) -> None:
    segment = LONG if which == "long" else UNSEEN[which]
    graph = runner.run(model.word_graph(segment, SRC, TGT))
    assert list(graph.source_tokens) == list(LatinWordTokenizer().tokenize(segment))
    states = {0} | {arc.prev_state for arc in graph.arcs} | {arc.next_state for arc in graph.arcs}
    assert states == set(range(len(states))), "states are numbered 0…n-1 from the initial state"
    reached = {0}
    for arc in graph.arcs:
        assert arc.prev_state in reached and arc.prev_state < arc.next_state, "topological order"
        reached.add(arc.next_state)
        assert 0 <= arc.source_segment_start < arc.source_segment_end <= len(graph.source_tokens)
        assert len(arc.confidences) == len(arc.target_tokens) == len(arc.sources)
        for pair in arc.alignment:
            assert 0 <= pair.source_index < arc.source_segment_end - arc.source_segment_start
            assert 0 <= pair.target_index < len(arc.target_tokens)
    assert graph.final_states and set(graph.final_states) <= reached
    assert paths(graph) > 1
    words = sum(len(arc.target_tokens) for arc in graph.arcs) + len(graph.final_states)
    assert words <= MAX_GRAPH_WORDS


def to_machine(graph: engine_pb2.WordGraph) -> WordGraph:
    arcs = [
        WordGraphArc(
            arc.prev_state,
            arc.next_state,
            arc.score,
            list(arc.target_tokens),
            WordAlignmentMatrix.from_word_pairs(
                arc.source_segment_end - arc.source_segment_start,
                len(arc.target_tokens),
                {(a.source_index, a.target_index) for a in arc.alignment},
            ),
            Range.create(arc.source_segment_start, arc.source_segment_end),
            [TranslationSources.SMT if s.values else TranslationSources.NONE for s in arc.sources],
            list(arc.confidences),
        )
        for arc in graph.arcs
    ]
    return WordGraph(graph.source_tokens, arcs, graph.final_states, graph.initial_state_score)


class Words(LatinWordTokenizer):
    pass


def interactive_results(segment: str, graph: engine_pb2.WordGraph, prefix: str) -> list[str]:
    """sil-machine's interactive translator over the graph: its first suggestions after typing
    `prefix`. Run in a thread with a deadline, since sil-machine 1.9.2's error-correction search
    blocks for ever on graphs with more than 1,000 hypotheses."""
    found: list[str] = []

    def work() -> None:
        translator = InteractiveTranslator(
            ErrorCorrectionModel(),
            None,  # type: ignore[arg-type]
            Words(),
            LatinWordDetokenizer(),
            segment,
            to_machine(graph),
            True,
        )
        translator.set_prefix(prefix)
        results: Iterable[Any] = translator.get_current_results()
        for result in results:
            found.append(result.translation)
            if len(found) == 3:
                break

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "sil-machine's interactive translator hung on the word graph"
    return found


@pytest.mark.parametrize("which", [0, "long"])
def test_sil_machine_interactive_translator_uses_the_graph(
    model: SmtModel, runner: asyncio.Runner, which: Any
) -> None:
    segment = LONG if which == "long" else UNSEEN[which]
    graph = runner.run(model.word_graph(segment, SRC, TGT))
    [best] = runner.run(model.translate(segment, 1, SRC, TGT))
    [first, *_] = interactive_results(segment, graph, "")
    assert first.split()[0] == best.translation.split()[0]
    typed = " ".join(best.translation.split()[:2]) + " "
    suggestions = interactive_results(segment, graph, typed)
    assert suggestions and all(s.startswith(typed.strip()) for s in suggestions)


def test_train_segment_updates_the_model_at_once_and_skips_a_seq_applied(
    node: InferenceNode, runner: asyncio.Runner
) -> None:
    import sacrebleu

    trained = runner.run(node.models.get(ref(3)))
    source, target = UNSEEN[5], TARGETS[PAIRS + 5]
    [before] = runner.run(trained.translate(source, 1, SRC, TGT))
    runner.run(trained.train_segment(source, target, True, 11))
    [after] = runner.run(trained.translate(source, 1, SRC, TGT))
    chrf = sacrebleu.sentence_chrf
    assert chrf(after.translation, [target]).score > chrf(before.translation, [target]).score + 10

    runner.run(trained.train_segment(source, "Neno moja tu.", True, 11))
    [again] = runner.run(trained.translate(source, 1, SRC, TGT))
    assert again.translation == after.translation, "seq 11 was applied already: nothing changes"
    assert isinstance(trained, SmtModel) and trained.applied_segments == {11}


def test_a_load_replays_the_engines_trained_segments_in_order(
    node: InferenceNode, runner: asyncio.Runner, segments_server: tuple[TrainSegments, int]
) -> None:
    servicer, _ = segments_server
    plain = runner.run(node.models.get(ref(1)))
    replayed = runner.run(node.models.get(ref(2)))
    assert isinstance(replayed, SmtModel) and replayed.applied_segments == {7}
    assert "models/e1/2" in servicer.calls
    [from_plain] = runner.run(plain.translate(UNSEEN[0], 1, SRC, TGT))
    [from_replayed] = runner.run(replayed.translate(UNSEEN[0], 1, SRC, TGT))
    assert from_replayed.translation != from_plain.translation
    assert from_replayed.translation.split()[:3] == TARGETS[PAIRS].split()[:3], "the replayed pair is learnt"


def test_a_load_whose_segments_cannot_be_fetched_fails(
    tmp_path: Path, folder: Path, segments_server: tuple[TrainSegments, int], runner: asyncio.Runner
) -> None:
    servicer, port = segments_server
    settings = Settings(
        home=tmp_path,
        node=NodeSettings(api_addresses=[f"127.0.0.1:{port}"], token=TOKEN, device="cpu", load_retry_s=1),
    )
    publish_revision(open_store(settings.resolved_store_url), manifest(9), folder)
    node = InferenceNode(settings)
    statuses: list[node_pb2.ModelStatus] = []
    node.models.listeners.append(statuses.append)
    servicer.failing = True
    try:
        with pytest.raises(SegmentsUnavailable, match="not this node's engine"):
            runner.run(node.models.get(ref(9)))
    finally:
        servicer.failing = False
    assert statuses[-1].state == node_pb2.MODEL_STATE_FAILED
    assert node.models.loaded() == []
    runner.run(node.models.close())


def process_gone(pid: int) -> bool:
    """Whether the process has exited (or is a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith(("Z", "X"))
    except (FileNotFoundError, IndexError):
        return True


def test_a_model_whose_worker_died_is_dropped_and_reloaded_with_its_segments(
    node: InferenceNode, runner: asyncio.Runner, segments_server: tuple[TrainSegments, int]
) -> None:
    servicer, _ = segments_server
    publish_revision(node.models.store, manifest(4), node.models._folders[ref(1).location])
    servicer.segments["models/e1/4"] = [
        node_pb2.TrainSegmentOp(
            source_segment=UNSEEN[0], target_segment=TARGETS[PAIRS], sentence_start=True, seq=21
        )
    ]
    statuses: list[node_pb2.ModelStatus] = []
    node.models.listeners.append(statuses.append)
    first = runner.run(node.models.get(ref(4)))
    assert isinstance(first, SmtModel)
    pid = runner.run(first.worker_pid())
    os.kill(pid, signal.SIGKILL)
    while not process_gone(pid):
        runner.run(asyncio.sleep(0.01))

    item = node_pb2.WorkItem(
        request_id="r1", model=ref(4), translate=node_pb2.TranslateOp(segment=UNSEEN[0], n=1)
    )
    failed = runner.run(node._execute(item))
    assert failed.error.code == node_pb2.WORK_ERROR_CODE_MODEL_UNAVAILABLE, failed
    runner.run(asyncio.sleep(0))  # the drop the model's death scheduled
    assert ref(4).location not in node.models.loaded()
    assert [s.state for s in statuses][-1] == node_pb2.MODEL_STATE_UNLOADED
    with pytest.raises(WorkerLost):
        runner.run(first.translate(UNSEEN[0], 1, SRC, TGT))

    answered = runner.run(
        node._execute(node_pb2.WorkItem(request_id="r2", model=ref(4), translate=item.translate))
    )
    assert not answered.HasField("error"), answered
    second = runner.run(node.models.get(ref(4)))
    assert isinstance(second, SmtModel) and second is not first
    assert second.applied_segments == {21}, "the reload replayed the engine's trained segments"
    assert runner.run(second.worker_pid()) != pid
    node.models.listeners.remove(statuses.append)
