"""Pretranslated USFM from real Paratext projects: a build's export carries the target text, the
job's own detection reports its quote convention over the platform API with the job token, the
pretranslations stream in through InsertPretranslations, and every template, text origin, marker
and quotation-mark behaviour is read back over REST."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from build_jobs.job import _report_quote_conventions
from build_jobs.report import PlatformReporter
from serval_api.auth import ALL_SCOPES
from serval_api.db.models import BuildRow, EngineCorpusRow
from tests.api.conftest import RunningApi, create_engine
from tests.api.file_rows import set_chunks
from tests.api.test_build_export import corpus, parallel_corpus, text, upload
from tests.api.test_pretranslations import ENGINES, Job, start_build
from tests.paratext import book_usfm, ebible_verses, project_zip

ENG_MAT = ebible_verses("engwebp", "MAT", (1, 2, 3))
ENG_MRK = ebible_verses("engwebp", "MRK", (1,))
SWH_MAT = ebible_verses("swh1850", "MAT", (1, 3))
CHAPTER_2 = [(c, v) for c, v in ENG_MAT if c == 2]
NOTE = " \\f + \\fr 2:2 \\ft a note\\f*"
POETRY = " \\q2 and \\w more\\w* of it"


def source_project() -> bytes:
    mat = book_usfm("MAT", ENG_MAT, heading="Heading", extras={(2, 2): NOTE, (2, 3): POETRY})
    return project_zip("SRC", "en", {"MAT": mat, "MRK": book_usfm("MRK", ENG_MRK)})


def target_project() -> bytes:
    """Swahili MAT 1 and 3; chapter 2's verses are there but empty, for the pretranslations."""
    verses = {ref: SWH_MAT.get(ref, "") for ref in ENG_MAT if ref in SWH_MAT or ref[0] == 2}
    return project_zip("TRG", "sw", {"MAT": book_usfm("MAT", verses)})


def pretranslation(ref: str) -> str:
    """What the model writes: normalized (typewriter) quotation marks."""
    return f"Tafsiri {ref}: \"Habari 'njema' leo.\""


def denormalized(ref: str) -> str:
    return f"Tafsiri {ref}: “Habari ‘njema’ leo.”"


def verse_texts(usfm: str) -> dict[tuple[int, int], str]:
    texts = {}
    chapter = 0
    for line in usfm.splitlines():
        if match := re.match(r"\\c (\d+)", line):
            chapter = int(match.group(1))
        elif match := re.match(r"\\v (\d+) ?(.*)$", line):
            texts[(chapter, int(match.group(1)))] = re.sub(r" ?\\f .*\\f\*", "", match.group(2)).strip()
    return texts


def without_remarks(usfm: str) -> str:
    """The book without its `\\rem` lines (whose paragraph sentence follows the behavior)."""
    return "\n".join(line for line in usfm.splitlines() if not line.startswith("\\rem "))


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


def paratext_corpus(client: httpx.Client, language: str, data: bytes) -> tuple[str, str]:
    file_id = upload(client, f"{language}.zip", data, "Paratext")
    response = client.post("/corpora", json={"language": language, "files": [{"fileId": file_id}]})
    assert response.status_code == 201, response.text
    return response.json()["id"], file_id


def read_build(api: RunningApi, build_id: str) -> BuildRow:
    assert api.service.services is not None

    async def read() -> BuildRow:
        async with api.service.services.db.session() as s:  # type: ignore[union-attr]
            build = await s.get(BuildRow, build_id)
            assert build is not None
            return build

    return api.run(read())


def add_engine_corpus(api: RunningApi, engine_id: str, source_file: str, target_file: str) -> str:
    """An engine corpus of Serval's older API, as the engine-corpora endpoints store it."""
    assert api.service.services is not None

    async def add() -> None:
        async with api.service.services.db.session() as s:  # type: ignore[union-attr]
            s.add(
                EngineCorpusRow(
                    id="ec-quotes",
                    engine_id=engine_id,
                    owner="owner-a",
                    source_language="en",
                    target_language="sw",
                    source_files=[{"fileId": source_file, "textId": "SRC"}],
                    target_files=[{"fileId": target_file, "textId": "TRG"}],
                )
            )

    api.run(add())
    return "ec-quotes"


@pytest.fixture
def built(api: RunningApi, owner: httpx.Client) -> dict[str, Any]:
    """An engine whose completed build pretranslated MAT 2 and MRK 1 (the verses the target lacks),
    plus MAT 1:1, which the target has, so that text origins differ there."""
    engine_id = create_engine(owner)["id"]
    source_id, source_file = paratext_corpus(owner, "en", source_project())
    target_id, target_file = paratext_corpus(owner, "sw", target_project())
    pc_id = parallel_corpus(owner, engine_id, source_id, target_id)
    ec_id = add_engine_corpus(api, engine_id, source_file, target_file)
    job: Job = start_build(api, owner, engine_id, pc_id)
    export = job.source_rows()
    refs = [row["sourceRefs"][0] for row in export]
    assert refs == [f"MAT 2:{v}" for _, v in CHAPTER_2] + [f"MRK 1:{v}" for _, v in ENG_MRK]

    assert api.service.services is not None
    store = api.service.services.store
    reporter = PlatformReporter(api.grpc_target, job.build_id, job.token)
    try:
        _report_quote_conventions(api.launcher.specs[-1], store, reporter)
    finally:
        reporter.close()

    extra = {**export[0], "sourceRefs": ["MAT 1:1"], "targetRefs": ["MAT 1:1"]}
    rows = [
        {**row, "translation": pretranslation(row["sourceRefs"][0]), "confidence": 0.75}
        for row in [extra, *export]
    ]
    job.insert([*rows, *({**row, "corpusId": ec_id} for row in rows)])
    job.completed()
    return {"engine": engine_id, "pc": pc_id, "ec": ec_id, "build": job.build_id, "target_file": target_file}


def get_usfm(client: httpx.Client, built: dict[str, Any], book: str = "MAT", **params: str) -> httpx.Response:
    url = f"{ENGINES}/{built['engine']}/parallel-corpora/{built['pc']}/pretranslations/{book}/usfm"
    return client.get(url, params={key.replace("_", "-"): value for key, value in params.items()})


def test_the_job_reports_the_target_quote_convention(api: RunningApi, built: dict[str, Any]) -> None:
    build = read_build(api, built["build"])
    assert build.target_quote_convention == "standard_english"
    assert [a.model_dump(by_alias=True, exclude_none=True) for a in build.analysis or []] == [
        {
            "parallelCorpusRef": built["pc"],
            "targetQuoteConvention": "standard_english",
            "canDenormalizeQuotes": True,
        }
    ]


EXPECTED_TARGET = {
    "PreferExisting": {(1, 1): "existing", (1, 2): "existing", (2, 1): "pretranslated", (3, 1): "existing"},
    "PreferPretranslated": {
        (1, 1): "pretranslated",
        (1, 2): "existing",
        (2, 1): "pretranslated",
        (3, 1): "existing",
    },
    "OnlyExisting": {(1, 1): "existing", (1, 2): "existing", (2, 1): "", (3, 1): "existing"},
    "OnlyPretranslated": {(1, 1): "pretranslated", (1, 2): "", (2, 1): "pretranslated", (3, 1): ""},
}


def expected_text(kind: str, ref: tuple[int, int]) -> str:
    if kind == "existing":
        return SWH_MAT[ref]
    return pretranslation(f"MAT {ref[0]}:{ref[1]}") if kind == "pretranslated" else ""


@pytest.mark.parametrize("template", ["Target", "Auto"])
@pytest.mark.parametrize("origin", list(EXPECTED_TARGET))
def test_target_template(owner: httpx.Client, built: dict[str, Any], template: str, origin: str) -> None:
    response = get_usfm(owner, built, template=template, text_origin=origin)
    assert response.status_code == 200, response.text
    texts = verse_texts(response.text)
    assert set(texts) == {ref for ref in ENG_MAT if ref in SWH_MAT or ref[0] == 2}, "the target's verses"
    for ref, kind in EXPECTED_TARGET[origin].items():
        assert texts[ref] == expected_text(kind, ref), (origin, ref)
    assert "Heading" not in response.text and "\\f " not in response.text, "the target's own markers only"


@pytest.mark.parametrize("origin", list(EXPECTED_TARGET))
def test_source_template(owner: httpx.Client, built: dict[str, Any], origin: str) -> None:
    response = get_usfm(owner, built, template="Source", text_origin=origin)
    assert response.status_code == 200, response.text
    texts = verse_texts(response.text)
    assert set(texts) == set(ENG_MAT), "the source's verses"
    pretranslated = origin != "OnlyExisting"
    for ref in ENG_MAT:
        want = (
            pretranslation(f"MAT {ref[0]}:{ref[1]}")
            if pretranslated and (ref[0] == 2 or ref == (1, 1))
            else ""
        )
        assert texts[ref].split(" \\q2")[0] == want, (origin, ref)
    assert all(ENG_MAT[ref][:30] not in response.text for ref in ENG_MAT), "the source's words never appear"


def test_auto_falls_back_to_the_source_and_missing_books_answer_204(
    owner: httpx.Client, built: dict[str, Any]
) -> None:
    mark = get_usfm(owner, built, "MRK")
    assert mark.status_code == 200, "the target lacks MRK: Auto uses the source project"
    assert verse_texts(mark.text) == {(1, v): pretranslation(f"MRK 1:{v}") for _, v in ENG_MRK}
    assert mark.text.startswith("\\id MRK")
    assert get_usfm(owner, built, "MRK", template="Target").status_code == 204
    for template in ("Auto", "Source", "Target"):
        assert get_usfm(owner, built, "LUK", template=template).status_code == 204


def test_quotation_mark_behaviors(owner: httpx.Client, built: dict[str, Any]) -> None:
    denorm = verse_texts(get_usfm(owner, built, quotation_mark_behavior="Denormalized").text)
    normal = verse_texts(get_usfm(owner, built, quotation_mark_behavior="Normalized").text)
    assert normal == verse_texts(get_usfm(owner, built).text), "Normalized is the default, as in Serval"
    camel = owner.get(
        f"{ENGINES}/{built['engine']}/parallel-corpora/{built['pc']}/pretranslations/MAT/usfm",
        params={"quotationMarkBehavior": "Normalized"},
    )
    assert verse_texts(camel.text) == normal
    for _, v in CHAPTER_2:
        ref = f"MAT 2:{v}"
        assert denorm[(2, v)] == denormalized(ref), "into the detected standard_english"
        assert normal[(2, v)] == pretranslation(ref), "as the model wrote them"
    for ref in SWH_MAT:
        assert denorm[ref] == normal[ref] == SWH_MAT[ref], "the target's existing text is left as it is"


def test_marker_behaviors(owner: httpx.Client, built: dict[str, Any]) -> None:
    default = get_usfm(owner, built, template="Source").text
    assert NOTE.strip() in default and "\\q2" in default, "paragraph and embed markers preserved"
    assert "\\w" not in default, "style markers stripped by default"
    position = get_usfm(
        owner,
        built,
        template="Source",
        paragraph_marker_behavior="PreservePosition",
        embed_behavior="PreservePosition",
    ).text
    assert without_remarks(position) == without_remarks(default), (
        "without word alignments, PreservePosition keeps markers as Preserve does"
    )
    flipped = get_usfm(
        owner,
        built,
        template="Source",
        paragraph_marker_behavior="Strip",
        embed_behavior="Strip",
        style_marker_behavior="Preserve",
    ).text
    assert "\\f " not in flipped and "\\w" in flipped
    # sil-machine 1.9.2 keeps a paragraph that starts inside a replaced verse whatever the behavior.
    assert "\\q2" in flipped
    camel = owner.get(
        f"{ENGINES}/{built['engine']}/parallel-corpora/{built['pc']}/pretranslations/MAT/usfm",
        params={"template": "Source", "paragraphMarkerBehavior": "Strip", "embedBehavior": "Strip"},
    ).text
    assert "\\f " not in camel
    assert verse_texts(flipped)[(2, 1)] == verse_texts(default)[(2, 1)]


def test_pretranslation_reads(owner: httpx.Client, built: dict[str, Any]) -> None:
    base = f"{ENGINES}/{built['engine']}"
    rows = owner.get(
        f"{base}/parallel-corpora/{built['pc']}/pretranslations", params={"text-id": "MAT"}
    ).json()
    assert [row["sourceRefs"] for row in rows] == [["MAT 1:1"], *([f"MAT 2:{v}"] for _, v in CHAPTER_2)]
    assert all(row["confidence"] == 0.75 and row["refs"] == row["targetRefs"] for row in rows)
    by_path = owner.get(f"{base}/parallel-corpora/{built['pc']}/pretranslations/MAT")
    assert by_path.status_code == 200 and by_path.json() == rows
    assert owner.get(f"{base}/corpora/{built['pc']}/pretranslations/MAT").json() == rows, (
        "parallel corpus fallback"
    )
    assert owner.get(f"{base}/corpora/{built['pc']}/pretranslations", params={"textId": "MAT"}).json() == rows


def test_engine_corpus_reads(api: RunningApi, owner: httpx.Client, built: dict[str, Any]) -> None:
    base = f"{ENGINES}/{built['engine']}/corpora/{built['ec']}/pretranslations"
    rows = owner.get(base, params={"text-id": "MRK"}).json()
    assert [row["translation"] for row in rows] == [pretranslation(f"MRK 1:{v}") for _, v in ENG_MRK]
    assert owner.get(f"{base}/MRK").json() == rows
    usfm = owner.get(f"{base}/MAT/usfm", params={"template": "Target", "text-origin": "PreferExisting"})
    assert usfm.status_code == 200, usfm.text
    texts = verse_texts(usfm.text)
    assert texts[(1, 2)] == SWH_MAT[(1, 2)]
    assert texts[(2, 1)] == pretranslation("MAT 2:1"), (
        "the build analysed no such corpus: quotes left as written"
    )
    assert owner.get(f"{base}/MRK/usfm").status_code == 200
    assert owner.get(f"{ENGINES}/{built['engine']}/corpora/nothing/pretranslations").status_code == 404
    with api.client("owner-b", ALL_SCOPES) as other:
        assert other.get(base).status_code == 403


def test_impossible_requests_answer_400(owner: httpx.Client, built: dict[str, Any]) -> None:
    source_id, _ = paratext_corpus(owner, "en", source_project())
    text_target = corpus(owner, "sw", {"MAT.txt": text(list(SWH_MAT.values())[:3])})
    pc_id = parallel_corpus(owner, built["engine"], source_id, text_target)
    url = f"{ENGINES}/{built['engine']}/parallel-corpora/{pc_id}/pretranslations/MAT/usfm"
    target = owner.get(url, params={"template": "Target"})
    assert target.status_code == 400 and "template Target" in target.json()["message"]
    auto = owner.get(url)
    assert auto.status_code == 200 and verse_texts(auto.text)[(1, 1)] == "", "Auto: the source project"
    for params in (
        {"text-origin": "Sometimes"},
        {"quotation-mark-behavior": "Curly"},
        {"embed-behavior": "x"},
    ):
        assert owner.get(url, params=params).status_code == 400, params


def test_an_unreadable_project_answers_an_error_id_not_the_store_path(
    api: RunningApi,
    owner: httpx.Client,
    built: dict[str, Any],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    set_chunks(api, built["target_file"], b"PK\x03\x04 not a zip archive")
    broken = get_usfm(owner, built, template="Target")
    assert broken.status_code == 400, broken.text
    message = broken.json()["message"]
    assert message.startswith("the target Paratext project cannot be read (error id ")
    assert str(tmp_path) not in broken.text
    error_id = message.rsplit(" ", 1)[-1].rstrip(")")
    [record] = [r for r in caplog.records if getattr(r, "error_id", None) == error_id]
    assert getattr(record, "engine_id", None) == built["engine"]

    set_chunks(api, built["target_file"])  # no chunk and nothing in the store: the file's contents are gone
    gone = get_usfm(owner, built, template="Target")
    assert gone.status_code == 409, gone.text
    assert "error id" in gone.json()["message"] and str(tmp_path) not in gone.text
