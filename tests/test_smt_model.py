"""The `smt-transfer` family on the node: a real Thot model trained here on 300 English→Swahili
verse pairs, published to a real local model store, loaded by a real `InferenceNode`'s model
manager (which replays the engine's trained segments from a real gRPC `GetTrainSegments` server),
and driven through translate, n-best, prefix, word graph (also through sil-machine's
`InteractiveTranslator`) and train-segment."""

from __future__ import annotations

import asyncio
import os
import shutil
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
from inference_gpu.families.smt.model import SmtModel, WorkerLost
from inference_gpu.families.smt.word_graph import MAX_GRAPH_WORDS
from inference_gpu.node import InferenceNode
from inference_gpu.trained_segments import SegmentsUnavailable
from serval.inference.v1 import node_pb2, node_pb2_grpc
from serval_common.core import TranslationSource
from serval_common.core import WordGraph as CoreGraph
from serval_common.manifest import Manifest
from serval_common.settings import NodeSettings, Settings
from serval_common.smt_build_options import SmtBuildOptions
from serval_common.store import open_store
from serval_common.thot_smt import SmtFolder, load_engine
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


def test_translate(model: SmtModel, runner: asyncio.Runner, folder: Path) -> None:
    engine = load_engine(folder)
    try:
        as_given = {segment: list(engine.translate(segment).target_tokens) for segment in UNSEEN[:3]}
    finally:
        engine.close()
    for segment in UNSEEN[:3]:
        [result] = runner.run(model.translate(segment, 1, SRC, TGT))
        words = list(LatinWordTokenizer().tokenize(segment))
        assert list(result.source_tokens) == words
        count = len(result.target_tokens)
        assert count > 0 and len(result.confidences) == len(result.sources) == count
        assert all(0 <= c <= 1 for c in result.confidences)
        assert result.translation == LatinWordDetokenizer().detokenize(list(result.target_tokens))
        assert list(result.target_tokens) == as_given[segment], (
            "the words as the model gives them: no sentence-start capitalisation by default, as Serval"
        )
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
            assert list(result.sources[: len(expected)]) == [TranslationSource.HUMAN] * len(expected)
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
        assert list(result.sources[:2]) == [TranslationSource.HUMAN] * 2
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


def paths(graph: CoreGraph) -> int:
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


def to_machine(graph: CoreGraph) -> WordGraph:
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
            [TranslationSources.SMT if s else TranslationSources.NONE for s in arc.sources],
            list(arc.confidences),
        )
        for arc in graph.arcs
    ]
    return WordGraph(list(graph.source_tokens), arcs, list(graph.final_states), graph.initial_state_score)


class Words(LatinWordTokenizer):
    pass


def interactive_results(segment: str, graph: CoreGraph, prefix: str) -> list[str]:
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
    learnt = [w.lower() for w in from_replayed.translation.split()[:3]]
    assert learnt == [w.lower() for w in TARGETS[PAIRS].split()[:3]], (
        "the replayed pair is learnt (its first word cased as the model gives it)"
    )


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
    assert node.models.held.loaded() == []
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
    publish_revision(node.models.store, manifest(4), node.models.held.folder_of(ref(1).location))
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
    failed = runner.run(node.work.execute(item))
    assert failed.error.code == node_pb2.WORK_ERROR_CODE_MODEL_UNAVAILABLE, failed
    runner.run(asyncio.sleep(0))  # the drop the model's death scheduled
    assert ref(4).location not in node.models.held.loaded()
    assert [s.state for s in statuses][-1] == node_pb2.MODEL_STATE_UNLOADED
    with pytest.raises(WorkerLost):
        runner.run(first.translate(UNSEEN[0], 1, SRC, TGT))

    answered = runner.run(
        node.work.execute(node_pb2.WorkItem(request_id="r2", model=ref(4), translate=item.translate))
    )
    assert not answered.HasField("error"), answered
    second = runner.run(node.models.get(ref(4)))
    assert isinstance(second, SmtModel) and second is not first
    assert second.applied_segments == {21}, "the reload replayed the engine's trained segments"
    assert runner.run(second.worker_pid()) != pid
    node.models.listeners.remove(statuses.append)


def test_sentence_start_capitalisation_is_a_build_option_off_by_default(
    node: InferenceNode, runner: asyncio.Runner, folder: Path, tmp_path: Path
) -> None:
    """A revision built with `capitalizeSentenceStart` capitalises a sentence's first word; the
    default one (revision 1) answers it as the model gives it."""
    assert SmtBuildOptions().capitalize_sentence_start is False
    assert SmtBuildOptions.parse('{"capitalizeSentenceStart": true}').capitalize_sentence_start is True
    capitalising = tmp_path / "model"
    shutil.copytree(folder, capitalising)
    settings = SmtFolder.read(capitalising)
    assert settings.capitalize_sentence_start is False, "the default build writes it off"
    settings.model_copy(update={"capitalize_sentence_start": True}).write(capitalising)
    publish_revision(node.models.store, manifest(5), capitalising)
    plain = runner.run(node.models.get(ref(1)))
    capital = runner.run(node.models.get(ref(5)))
    assert isinstance(plain, SmtModel) and isinstance(capital, SmtModel)
    lowered = 0
    for segment in UNSEEN[:8]:
        [as_given] = runner.run(plain.translate(segment, 1, SRC, TGT))
        [capitalised] = runner.run(capital.translate(segment, 1, SRC, TGT))
        words = list(as_given.target_tokens)
        first = next(i for i, w in enumerate(words) if any(c.isalpha() for c in w))
        lowered += words[first][0].islower()
        assert list(capitalised.target_tokens) == [
            *words[:first],
            words[first][0].upper() + words[first][1:],
            *words[first + 1 :],
        ]
    assert lowered, "some first word is lowercase as the model gives it, so the option shows"


def train_item(revision: int, seq: int, previous_seq: int, source: str, target: str) -> node_pb2.WorkItem:
    return node_pb2.WorkItem(
        request_id=f"train-{revision}-{seq}",
        model=ref(revision),
        train_segment=node_pb2.TrainSegmentOp(
            source_segment=source,
            target_segment=target,
            sentence_start=True,
            seq=seq,
            previous_seq=previous_seq,
        ),
    )


def test_a_pair_never_starts_a_load(
    node: InferenceNode, runner: asyncio.Runner, folder: Path, segments_server: tuple[TrainSegments, int]
) -> None:
    """Neither a revision this node never loaded nor one whose load failed is loaded by a pair: it
    answers "model unavailable" (the API service sends pairs to READY models only; a load replays)."""
    servicer, _ = segments_server
    publish_revision(node.models.store, manifest(11), folder)
    statuses: list[node_pb2.ModelStatus] = []
    node.models.listeners.append(statuses.append)
    try:
        answer = runner.run(node.work.execute(train_item(11, 40, 0, UNSEEN[0], TARGETS[PAIRS])))
        assert answer.error.code == node_pb2.WORK_ERROR_CODE_MODEL_UNAVAILABLE, answer
        assert statuses == [] and ref(11).location not in node.models.held.loaded()

        servicer.failing = True
        try:
            with pytest.raises(SegmentsUnavailable):
                runner.run(node.models.get(ref(11)))
        finally:
            servicer.failing = False
        assert statuses[-1].state == node_pb2.MODEL_STATE_FAILED
        failed_at = len(statuses)
        answer = runner.run(node.work.execute(train_item(11, 41, 40, UNSEEN[0], TARGETS[PAIRS])))
        assert answer.error.code == node_pb2.WORK_ERROR_CODE_MODEL_UNAVAILABLE, answer
        assert len(statuses) == failed_at, "no load started: the failed revision stays as it is"
    finally:
        node.models.listeners.remove(statuses.append)


def test_a_model_that_missed_pairs_fetches_them_in_order(
    node: InferenceNode, runner: asyncio.Runner, folder: Path, segments_server: tuple[TrainSegments, int]
) -> None:
    """A pushed pair whose predecessor the model lacks, and a CatchUp, make the node fetch what the
    model lacks (here from an API service of an earlier release: one message, no `after_seq`), apply
    it in order, once, and report the new number."""
    servicer, _ = segments_server
    import sacrebleu

    publish_revision(node.models.store, manifest(12), folder)
    plain = runner.run(node.models.get(ref(1)))
    [unlearned] = runner.run(plain.translate(UNSEEN[7], 1, SRC, TGT))

    def op(seq: int, k: int) -> node_pb2.TrainSegmentOp:
        return node_pb2.TrainSegmentOp(
            source_segment=UNSEEN[k], target_segment=TARGETS[PAIRS + k], sentence_start=True, seq=seq
        )

    servicer.segments["models/e1/12"] = [op(31, 6)]
    model = runner.run(node.models.get(ref(12)))
    assert isinstance(model, SmtModel)
    assert node.models.held.trained_through(ref(12).location) == 31
    [status] = [s for s in node.models.held.statuses() if s.model.location == ref(12).location]
    assert status.HasField("trained_through") and status.trained_through == 31
    statuses: list[node_pb2.ModelStatus] = []
    node.models.listeners.append(statuses.append)
    try:
        servicer.segments["models/e1/12"] = [op(31, 6), op(32, 7), op(33, 8)]  # 32 never reached the node
        answer = runner.run(node.work.execute(train_item(12, 33, 32, UNSEEN[8], TARGETS[PAIRS + 8])))
        assert (answer.train_segment.seq, answer.train_segment.trained_through) == (33, 33), answer
        assert model.applied_segments == {31, 32, 33}
        assert [s.trained_through for s in statuses] == [33]

        late = runner.run(node.work.execute(train_item(12, 32, 31, UNSEEN[7], "Not applied twice.")))
        assert late.train_segment.trained_through == 33 and model.applied_segments == {31, 32, 33}

        servicer.segments["models/e1/12"].append(op(34, 9))
        calls = len(servicer.calls)
        runner.run(node.models.segments.catch_up(ref(12), 34))
        assert model.applied_segments == {31, 32, 33, 34} and len(servicer.calls) == calls + 1
        assert statuses[-1].trained_through == 34
        runner.run(node.models.segments.catch_up(ref(12), 34))
        assert len(servicer.calls) == calls + 1, "nothing lacking: nothing fetched"
        [learned] = runner.run(model.translate(UNSEEN[7], 1, SRC, TGT))
        chrf = sacrebleu.sentence_chrf
        target = [TARGETS[PAIRS + 7]]
        assert chrf(learned.translation, target).score > chrf(unlearned.translation, target).score + 10, (
            "the pair that missed the node is in the model"
        )
    finally:
        node.models.listeners.remove(statuses.append)
