"""The sil-machine interactive client (`serval_cli.interactive`): word graphs beyond sil-machine's
1,000-hypothesis queue complete with the guard and give the right suggestions, the library's own
processor is shown to hang on them (in a subprocess), the tiny NMT model's graph of a long verse
goes through, and the REST engine adapter drives a real API service."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import httpx
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

from inference_gpu.families.nmt.model import NmtModel
from serval_api.auth import ALL_ENGINE_SCOPES
from serval_cli.interactive import GuardedInteractiveTranslator, ServalInteractiveEngine
from serval_common.manifest import Manifest
from serval_common.settings import ApiSettings, NodeSettings, Settings
from serval_common.word_graph_guard import GuardedWordGraphProcessor, HypothesisQueue, to_machine
from tests.api.conftest import RunningApi, wait_for_build

ROOT = Path(__file__).resolve().parent.parent
LIBRARY_QUEUE_SIZE = 1000
"""`PriorityQueue(maxsize=1000)` in sil-machine 1.9.2's processor."""


def synthetic_graph(states: int, parallel: int, words: int = 2) -> WordGraph:
    """A chain of `states` source words, each translated by `parallel` alternative arcs of `words`
    words; alternative k scores -0.1·(k+1), so alternative 0 is best everywhere."""
    arcs = [
        WordGraphArc(
            state,
            state + 1,
            -0.1 * (k + 1),
            [f"w{state}a{k}p{j}" for j in range(words)],
            WordAlignmentMatrix.from_word_pairs(1, words, {(0, 0)}),
            Range.create(state, state + 1),
            [TranslationSources.NMT] * words,
            [0.5] * words,
        )
        for state in range(states)
        for k in range(parallel)
    ]
    return WordGraph([f"s{i}" for i in range(states)], arcs, [states], 0.0)


def hypotheses(graph: WordGraph) -> int:
    """How many hypotheses the processor starts a search with: one before each word of every arc,
    one per final state."""
    return sum(len(arc.target_tokens) for arc in graph.arcs) + len(graph.final_states)


def guarded(graph: WordGraph, max_results: int = 1000) -> GuardedInteractiveTranslator:
    return GuardedInteractiveTranslator(
        ErrorCorrectionModel(),
        None,
        LatinWordTokenizer(),
        LatinWordDetokenizer(),
        " ".join(graph.source_tokens),
        graph,
        True,
        max_results=max_results,
    )


LARGE = (120, 5, 2)
"""1,201 hypotheses."""


def test_a_graph_beyond_the_library_queue_gives_the_right_suggestions() -> None:
    graph = synthetic_graph(*LARGE)
    assert hypotheses(graph) > LIBRARY_QUEUE_SIZE
    translator = guarded(graph)
    best = [f"w{s}a0p{j}" for s in range(LARGE[0]) for j in range(2)]
    assert list(next(translator.get_current_results()).target_tokens) == best

    translator.set_prefix("w0a3p0 w0a3p1 w1a2p0 ")
    suggestion = list(next(translator.get_current_results()).target_tokens)
    assert suggestion[:3] == ["w0a3p0", "w0a3p1", "w1a2p0"]
    assert suggestion[3:] == ["w1a2p1", *best[4:]]

    translator.set_prefix("w0a3p0 w0a3p1 w1a4")
    completed = list(next(translator.get_current_results()).target_tokens)
    assert completed[2].startswith("w1a4") and completed[2] in {"w1a4p0", "w1a4p1"}
    assert completed[:2] == ["w0a3p0", "w0a3p1"]


@pytest.mark.parametrize("prefix", ["", "w0a2p0 ", "w0a1p0 w0a1p1 w1", "w0a0p0 w0a0p1 w1a3p0 w1a3p1 w2a1p0 "])
def test_the_guard_changes_no_suggestion_of_a_graph_the_library_handles(prefix: str) -> None:
    graph = synthetic_graph(6, 3, 2)
    assert hypotheses(graph) < LIBRARY_QUEUE_SIZE
    library = InteractiveTranslator(
        ErrorCorrectionModel(),
        None,  # type: ignore[arg-type]
        LatinWordTokenizer(),
        LatinWordDetokenizer(),
        " ".join(graph.source_tokens),
        graph,
        True,
    )
    translator = guarded(graph)
    library.set_prefix(prefix)
    translator.set_prefix(prefix)
    # Fewer than the queue holds: the library's generator would wait forever on its emptied queue.
    count = hypotheses(graph) - 1
    expected = [list(r.target_tokens) for r in islice(library.get_current_results(), count)]
    assert [list(r.target_tokens) for r in islice(translator.get_current_results(), count)] == expected


def test_reading_every_result_ends() -> None:
    graph = synthetic_graph(6, 3, 2)
    translator = guarded(graph)
    translator.set_prefix("w0a1p0 ")
    assert len(list(translator.get_current_results())) == hypotheses(graph)
    capped = guarded(graph, max_results=3)
    assert len(list(capped.get_current_results())) == 3


def test_the_hypothesis_queue_pops_best_first_and_empties() -> None:
    queue = HypothesisQueue(maxsize=2)
    for item in (5, 1, 4, 2, 3):
        queue.put(item)
    assert len(queue) == 5
    popped = []
    while queue.not_empty:
        popped.append(queue.get())
    assert popped == [1, 2, 3, 4, 5]
    assert not queue.not_empty
    assert isinstance(guarded(synthetic_graph(2, 2))._word_graph_processor, GuardedWordGraphProcessor)


UNGUARDED = textwrap.dedent(
    """
    import json, sys, threading, time
    from queue import PriorityQueue
    from machine.tokenization import LatinWordDetokenizer, LatinWordTokenizer
    from machine.translation import ErrorCorrectionModel, InteractiveTranslator
    from machine.translation import error_correction_word_graph_processor as processor
    from tests.test_interactive_client import synthetic_graph

    queues = []

    class Watched(PriorityQueue):
        # Records a put on a full queue and a get on an empty one: either waits on the very
        # thread that would have to free or fill the queue, so it can never return.
        def __init__(self, maxsize=0):
            super().__init__(maxsize)
            self.stuck = None
            queues.append(self)

        def put(self, item, block=True, timeout=None):
            if self.full():
                self.stuck = "put on a full queue"
            super().put(item, block, timeout)

        def get(self, block=True, timeout=None):
            if self.empty():
                self.stuck = "get on an empty queue"
            return super().get(block, timeout)

    processor.PriorityQueue = Watched

    def drive(graph, read_all):
        translator = InteractiveTranslator(
            ErrorCorrectionModel(), None, LatinWordTokenizer(), LatinWordDetokenizer(),
            " ".join(graph.source_tokens), graph, True,
        )
        results = translator.get_current_results()
        list(results) if read_all else next(results)

    found = {}
    for name, graph, read_all in (
        ("large graph, first result", synthetic_graph(120, 5, 2), False),
        ("small graph, every result", synthetic_graph(6, 3, 2), True),
    ):
        queues.clear()
        thread = threading.Thread(target=drive, args=(graph, read_all), daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while thread.is_alive() and not (queues and queues[-1].stuck) and time.monotonic() < deadline:
            time.sleep(0.01)
        found[name] = {"stuck": queues[-1].stuck if queues else None, "finished": not thread.is_alive()}
    print(json.dumps(found))
    """
)


def test_the_library_processor_hangs_without_the_guard() -> None:
    """In a subprocess (its stuck threads die with it): sil-machine's own processor waits forever
    on a graph over 1,000 hypotheses, and on its emptied queue once every result is read."""
    run = subprocess.run(
        [sys.executable, "-c", UNGUARDED], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found == {
        "large graph, first result": {"stuck": "put on a full queue", "finished": False},
        "small graph, every result": {"stuck": "get on an empty queue", "finished": False},
    }


LONG_VERSE = (
    "And he said to them, “Go into all the world, and preach the Good News to the whole creation. "
    "He who believes and is baptized will be saved; but he who disbelieves will be condemned, and "
    "these signs will accompany those who believe: in my name they will cast out demons.”"
)


@pytest.fixture(scope="module")
def wide_model(tiny_ct2_model: Path) -> Iterator[NmtModel]:
    """The tiny model with a wide beam and long outputs. Its graph of `LONG_VERSE` has about 90
    hypotheses (an NLLB beam's paths share their prefixes: about 300 even at beam 64), far under the
    library's 1,000, which the synthetic graphs above exceed."""
    settings = NodeSettings(
        device="cpu", compute_type="int8", beam_size=16, max_decoding_length=160, max_input_tokens=256
    )
    loaded = NmtModel.load(tiny_ct2_model, Manifest(kind="base-model"), settings)
    yield loaded
    asyncio.run(loaded.close())


def test_the_nmt_graph_of_a_long_verse_goes_through(wide_model: NmtModel) -> None:
    graph = asyncio.run(wide_model.word_graph(LONG_VERSE, "eng_Latn", "swh_Latn"))
    (best,) = asyncio.run(wide_model.translate(LONG_VERSE, 1, "eng_Latn", "swh_Latn"))
    machine_graph = to_machine(graph)
    translator = GuardedInteractiveTranslator(
        ErrorCorrectionModel(),
        None,
        LatinWordTokenizer(),
        LatinWordDetokenizer(),
        LONG_VERSE,
        machine_graph,
        True,
    )
    first = list(next(translator.get_current_results()).target_tokens)
    assert first == list(best.target_tokens)
    typed = first[:2]
    translator.set_prefix(" ".join(typed) + " ")
    suggestion = list(next(translator.get_current_results()).target_tokens)
    assert suggestion[:2] == typed
    assert len(suggestion) > 2
    translator.set_prefix(" ".join(typed) + " zzzq")
    corrected = list(next(translator.get_current_results()).target_tokens)
    assert corrected[:3] == [*typed, "zzzq"]
    assert sum(1 for _ in islice(translator.get_current_results(), 50)) == min(50, hypotheses(machine_graph))


@pytest.fixture
def echo_service(tmp_path: Path, database_url: str) -> Iterator[tuple[RunningApi, str, str]]:
    """A real API service in this process with an echo engine built: (service, API key, engine id)."""
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0),
    )
    running = RunningApi(settings)
    try:
        api_key = running.api_key("owner-a", ALL_ENGINE_SCOPES)
        with httpx.Client(base_url=f"{running.rest_url}/api/v1", headers={"X-API-Key": api_key}) as client:
            engine = client.post(
                "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "echo"}
            ).json()
            build = client.post(f"/translation/engines/{engine['id']}/builds", json={})
            assert build.status_code == 201 and wait_for_build(client, build.json())["state"] == "Completed"
        yield running, api_key, engine["id"]
    finally:
        running.close()


def test_the_rest_engine_drives_a_real_service(echo_service: tuple[RunningApi, str, str]) -> None:
    running, api_key, engine_id = echo_service
    segment = "In the beginning was the Word, and the Word was with God."
    with ServalInteractiveEngine(running.rest_url, api_key, engine_id) as engine:
        assert engine.engine_type == "echo"
        graph = engine.get_word_graph(segment)
        assert list(graph.source_tokens) == list(LatinWordTokenizer().tokenize(segment))
        assert all(arc.sources == [TranslationSources.NMT] for arc in graph.arcs)

        translator = engine.create_translator(segment, word_graph=graph)
        assert list(next(translator.get_current_results()).target_tokens) == list(graph.source_tokens)
        translator.set_prefix("In the beg")
        assert list(next(translator.get_current_results()).target_tokens)[:3] == ["In", "the", "beginning"]

        result = engine.translate(segment)
        assert result.translation == segment
        assert result.alignment.row_count == result.alignment.column_count == len(graph.source_tokens)
        assert [len(r.target_tokens) for r in engine.translate_n(2, segment)] == [
            len(graph.source_tokens)
        ] * 2
        (prefixed,) = engine.translate_prefix_json(segment, "In the")
        assert prefixed["translation"] == segment

        translator.set_prefix("Hapo mwanzo kulikuwako Neno")
        translator.approve(aligned_only=False)
        human = engine.translate(segment)
        assert human.translation == "Hapo mwanzo kulikuwako Neno"
        assert set(human.sources) == {TranslationSources.PREFIX}

        with pytest.raises(httpx.HTTPStatusError) as error:
            engine.translate("   ")
        assert error.value.response.status_code == 400
        assert set(engine.latencies) == {
            "engine",
            "word_graph",
            "translate",
            "translate_n",
            "translate_prefix",
            "train_segment",
        }
