"""The job side of pretranslation with the real tiny CTranslate2 model and a local model store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from build_jobs.data import source_key, target_key
from build_jobs.nmt.evaluation import NllbTranslator
from build_jobs.nmt.pretranslation import pretranslate, pretranslate_revision
from build_jobs.progress import Canceled
from build_jobs.publish import publish_inference_only
from serval_common.store import ModelStore, open_store
from tests.helpers import publish_tiny_base_model, verse_pairs

BUILD = "build1"


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return open_store((tmp_path / "store").as_uri())


def source_rows(segments: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "corpusId": "pc1",
            "textId": "MAT",
            "sourceRefs": [f"MAT 1:{n}"],
            "targetRefs": [f"MAT 1:{n}"],
            "translation": text,
        }
        for n, text in enumerate(segments, 1)
    ]


def export(store: ModelStore, rows: list[dict[str, Any]]) -> None:
    store.write_bytes(source_key(BUILD), json.dumps(rows).encode())


def run(store: ModelStore, model: Path, **kwargs: Any) -> list[dict[str, Any]]:
    kwargs.setdefault("beams", 2)
    kwargs.setdefault("batch_size", 64)
    return pretranslate(store, BUILD, model, "eng_Latn", "swh_Latn", **kwargs)


def test_rows_get_translations_and_confidences(store: ModelStore, tiny_ct2_model: Path) -> None:
    sources, _ = verse_pairs("engwebp", "swh1850", 5)
    segments = [sources[0], "", sources[1], "   ", sources[2], sources[3], sources[4]]
    export(store, source_rows(segments))
    progress: list[tuple[int, int]] = []

    rows = run(
        store, tiny_ct2_model, batch_size=2, progress=lambda done, total: progress.append((done, total))
    )

    assert progress == [(2, 5), (4, 5), (5, 5)], "one report per batch of two of the five non-empty segments"
    assert json.loads(store.read_bytes(target_key(BUILD))) == rows
    assert [(r["corpusId"], r["textId"], r["sourceRefs"], r["targetRefs"]) for r in rows] == [
        ("pc1", "MAT", [f"MAT 1:{n}"], [f"MAT 1:{n}"]) for n in range(1, 8)
    ]
    assert rows[1]["translation"] == rows[3]["translation"] == ""
    translated = [rows[i] for i in (0, 2, 4, 5, 6)]
    assert all(r["translation"].strip() for r in translated)
    assert all(0.0 < r["confidence"] <= 1.0 for r in rows)
    assert len({r["confidence"] for r in translated}) > 1, "confidences come from the model's scores"

    expected = NllbTranslator(tiny_ct2_model).translate(
        [segments[i] for i in (0, 2, 4, 5, 6)],
        "eng_Latn",
        "swh_Latn",
        beam_size=2,
        max_batch_size=2,
        max_length=256,
    )
    assert [r["translation"] for r in translated] == [t.text for t in expected], (
        "the same tokenization and decoding as the shared translator"
    )


def test_cancel_between_batches_writes_nothing(store: ModelStore, tiny_ct2_model: Path) -> None:
    sources, _ = verse_pairs("engwebp", "swh1850", 4)
    export(store, source_rows(sources))
    progress: list[tuple[int, int]] = []

    with pytest.raises(Canceled):
        run(
            store,
            tiny_ct2_model,
            batch_size=2,
            progress=lambda done, total: progress.append((done, total)),
            should_cancel=lambda: bool(progress),
        )
    assert progress == [(2, 4)]
    assert not store.exists(target_key(BUILD))


def test_nothing_to_pretranslate(store: ModelStore, tiny_ct2_model: Path) -> None:
    assert run(store, tiny_ct2_model) == [], "no export file"
    export(store, [])
    assert run(store, tiny_ct2_model) == [], "an empty export"
    assert not store.exists(target_key(BUILD))


def test_only_empty_segments_never_reach_the_model(store: ModelStore, tmp_path: Path) -> None:
    export(store, source_rows(["", " "]))
    rows = run(store, tmp_path / "no-model-here")
    assert [(r["translation"], r["confidence"]) for r in rows] == [("", 1.0), ("", 1.0)]


def test_an_inference_only_revision_is_fetched_through_its_base_model(
    store: ModelStore, tiny_ct2_model: Path
) -> None:
    publish_tiny_base_model(store, tiny_ct2_model, "tiny")
    publish_inference_only(
        store,
        engine_id="e1",
        revision=1,
        build_id=BUILD,
        base_model="tiny",
        source_language="eng_Latn",
        target_language="swh_Latn",
    )
    kwargs: dict[str, Any] = dict(
        engine_id="e1",
        revision=1,
        build_id=BUILD,
        source_code="eng_Latn",
        target_code="swh_Latn",
        beams=2,
        batch_size=8,
    )
    assert pretranslate_revision(store, **kwargs) == []
    export(store, source_rows(["In the beginning was the Word."]))
    [row] = pretranslate_revision(store, **kwargs)
    assert row["translation"].strip() and 0.0 < row["confidence"] <= 1.0
    assert json.loads(store.read_bytes("models/e1/1/manifest.json"))["max_positions"] == 256

    long_chapter = " ".join(verse_pairs("engwebp", "swh1850", 60)[0])
    export(store, source_rows([long_chapter]))
    [row] = pretranslate_revision(store, **kwargs)
    assert row["translation"].strip(), "a segment longer than the model's positions is cut, not fatal"
