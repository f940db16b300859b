from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from google.protobuf import empty_pb2

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ALL_SCOPES
from serval_api.service.build_segments import NO_PAIRS
from serval_common.store import ModelStore
from tests.api.conftest import RunningApi, create_engine
from tests.helpers import EBIBLE

DATA = EBIBLE


def verses(name: str, first_line: int, count: int) -> list[str]:
    lines = (DATA / name).read_text(encoding="utf-8").split("\n")
    return lines[first_line - 1 : first_line - 1 + count]


ENG_MAT = verses("engwebp.txt", 1, 3)
SWH_MAT = verses("swh1850.txt", 1, 3)
ENG_MRK = verses("engwebp.txt", 1072, 2)
SWH_MRK = verses("swh1850.txt", 1072, 2)


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


def store(api: RunningApi) -> ModelStore:
    assert api.service.services is not None
    return api.service.services.store


def upload(client: httpx.Client, name: str, data: bytes, fmt: str = "Text") -> str:
    response = client.post("/files", data={"format": fmt, "name": name}, files={"file": (name, data)})
    assert response.status_code == 201, response.text
    file_id: str = response.json()["id"]
    return file_id


def text(lines: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode()


def corpus(client: httpx.Client, language: str, files: dict[str, bytes]) -> str:
    refs = [{"fileId": upload(client, name, data)} for name, data in files.items()]
    response = client.post("/corpora", json={"language": language, "files": refs})
    assert response.status_code == 201, response.text
    corpus_id: str = response.json()["id"]
    return corpus_id


def parallel_corpus(client: httpx.Client, engine_id: str, source: str, target: str) -> str:
    response = client.post(
        f"/translation/engines/{engine_id}/parallel-corpora",
        json={"sourceCorpusIds": [source], "targetCorpusIds": [target]},
    )
    assert response.status_code == 201, response.text
    pc_id: str = response.json()["id"]
    return pc_id


def bible_engine(client: httpx.Client, eng_mrk: list[str] | None = None) -> tuple[dict[str, Any], str]:
    """MAT 1:1–3 and MRK 1:1–2 in English and Swahili; the Swahili MRK file has a blank line."""
    engine = create_engine(client)
    source = corpus(client, "en", {"MAT.txt": text(ENG_MAT), "MRK.txt": text(eng_mrk or ENG_MRK)})
    target = corpus(client, "sw", {"MRK.txt": text(["", SWH_MRK[1]]), "MAT.txt": text(SWH_MAT)})
    return engine, parallel_corpus(client, engine["id"], source, target)


def start(client: httpx.Client, engine_id: str, body: dict[str, Any]) -> httpx.Response:
    return client.post(f"/translation/engines/{engine_id}/builds", json=body)


def train_files(api: RunningApi, build_id: str) -> tuple[list[str], list[str]]:
    src = store(api).read_bytes(f"builds/{build_id}/train.src.txt").decode().split("\n")
    trg = store(api).read_bytes(f"builds/{build_id}/train.trg.txt").decode().split("\n")
    assert src[-1] == trg[-1] == ""
    return src[:-1], trg[:-1]


EXPECTED_SRC = [*ENG_MAT, ENG_MRK[1]]
EXPECTED_TRG = [*SWH_MAT, SWH_MRK[1]]


def test_explicit_train_on_writes_paired_lines(api: RunningApi, owner: httpx.Client) -> None:
    engine, pc_id = bible_engine(owner)
    response = start(owner, engine["id"], {"trainOn": [{"parallelCorpusId": pc_id}]})
    assert response.status_code == 201, response.text
    build = response.json()
    assert train_files(api, build["id"]) == (EXPECTED_SRC, EXPECTED_TRG)
    assert build["executionData"]["trainCount"] == 4
    assert build["executionData"]["warnings"] == []
    assert api.launcher.specs[-1].train is True
    assert not store(api).exists(f"builds/{build['id']}/pretranslate.src.json")


def test_omitted_train_on_uses_all_parallel_corpora(api: RunningApi, owner: httpx.Client) -> None:
    engine, _ = bible_engine(owner)
    build = start(owner, engine["id"], {}).json()
    assert train_files(api, build["id"]) == (EXPECTED_SRC, EXPECTED_TRG)
    assert api.launcher.specs[-1].train is True


def test_empty_train_on_is_inference_only(api: RunningApi, owner: httpx.Client) -> None:
    engine, _ = bible_engine(owner)
    build = start(owner, engine["id"], {"trainOn": []}).json()
    assert api.launcher.specs[-1].train is False
    assert build["executionData"]["trainCount"] == 0
    assert store(api).list_keys(f"builds/{build['id']}") == []


def test_engine_without_corpora_builds_inference_only(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    assert start(owner, engine["id"], {}).status_code == 201
    assert api.launcher.specs[-1].train is False


def test_unknown_parallel_corpus_is_400_and_no_pairs_builds_inference_only(
    api: RunningApi, owner: httpx.Client
) -> None:
    """As Serval, corpora without a single pair are no error: the build trains nothing (warned)."""
    engine, _ = bible_engine(owner)
    unknown = start(owner, engine["id"], {"trainOn": [{"parallelCorpusId": "nope"}]})
    assert unknown.status_code == 400 and "unknown parallel corpus nope" in unknown.json()["message"]
    assert api.launcher.specs == []

    lonely = create_engine(owner)
    source = corpus(owner, "en", {"MAT.txt": text(ENG_MAT)})
    target = corpus(owner, "sw", {"LUK.txt": text(SWH_MAT)})
    parallel_corpus(owner, lonely["id"], source, target)
    response = start(owner, lonely["id"], {})
    assert response.status_code == 201, response.text
    assert response.json()["executionData"]["warnings"] == [NO_PAIRS]
    assert api.launcher.specs[-1].train is False


def test_filters_and_pretranslate(api: RunningApi, owner: httpx.Client) -> None:
    engine, pc_id = bible_engine(owner)
    source_id = owner.get(f"/translation/engines/{engine['id']}/parallel-corpora/{pc_id}").json()[
        "sourceCorpora"
    ][0]["id"]
    body = {
        "trainOn": [
            {"parallelCorpusId": pc_id, "sourceFilters": [{"corpusId": source_id, "textIds": ["MAT"]}]}
        ],
        "pretranslate": [{"parallelCorpusId": pc_id}],
    }
    build = start(owner, engine["id"], body).json()
    assert train_files(api, build["id"]) == (ENG_MAT, SWH_MAT)
    rows = json.loads(store(api).read_bytes(f"builds/{build['id']}/pretranslate.src.json"))
    assert rows == [
        {
            "corpusId": pc_id,
            "textId": "MRK",
            "sourceRefs": ["MRK:1"],
            "targetRefs": ["MRK:1"],
            "translation": ENG_MRK[0],
        }
    ]
    assert build["executionData"]["pretranslateCount"] == 1


def test_language_mismatch_is_a_warning(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    source = corpus(owner, "fr", {"MAT.txt": text(ENG_MAT)})
    target = corpus(owner, "sw", {"MAT.txt": text(SWH_MAT)})
    parallel_corpus(owner, engine["id"], source, target)
    build = start(owner, engine["id"], {}).json()
    [warning] = build["executionData"]["warnings"]
    assert source in warning and "'fr'" in warning


def paratext_zip(lines: list[str], book: str = "MAT") -> bytes:
    settings = (
        "<ScriptureText><Name>TST</Name><Encoding>65001</Encoding><Versification>4</Versification>"
        '<Naming PrePart="" PostPart="TST.SFM" BookNameForm="MAT" /></ScriptureText>'
    )
    usfm = f"\\id {book}\n\\c 1\n\\p\n" + "".join(f"\\v {n} {line}\n" for n, line in enumerate(lines, 1))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("Settings.xml", settings)
        archive.writestr(f"{book}TST.SFM", usfm)
    return buffer.getvalue()


def test_paratext_projects_pair_by_verse(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    source = owner.post(
        "/corpora",
        json={
            "language": "en",
            "files": [{"fileId": upload(owner, "en.zip", paratext_zip(ENG_MAT), "Paratext")}],
        },
    ).json()["id"]
    target_zip = paratext_zip([SWH_MAT[0], "", SWH_MAT[2]])
    target = owner.post(
        "/corpora",
        json={"language": "sw", "files": [{"fileId": upload(owner, "sw.zip", target_zip, "Paratext")}]},
    ).json()["id"]
    parallel_corpus(owner, engine["id"], source, target)
    build = start(owner, engine["id"], {}).json()
    assert train_files(api, build["id"]) == ([ENG_MAT[0], ENG_MAT[2]], [SWH_MAT[0], SWH_MAT[2]])


def test_grpc_start_build_exports_request_corpora(api: RunningApi, owner: httpx.Client) -> None:
    engine = create_engine(owner)
    key = owner.headers["X-API-Key"]
    src_file = upload(owner, "MAT.txt", text(ENG_MAT))
    trg_file = upload(owner, "MAT.txt", text(SWH_MAT))

    def side(corpus_id: str, language: str, location: str) -> engine_pb2.MonolingualCorpus:
        return engine_pb2.MonolingualCorpus(
            id=corpus_id,
            language=language,
            train_on_all=True,
            files=[
                engine_pb2.CorpusFile(location=location, format=engine_pb2.FILE_FORMAT_TEXT, text_id="MAT")
            ],
        )

    def request(target_location: str) -> engine_pb2.StartBuildRequest:
        return engine_pb2.StartBuildRequest(
            engine_type="Nmt",
            engine_id=engine["id"],
            build_id="b" * 24,
            corpora=[
                engine_pb2.ParallelCorpus(
                    id="pc",
                    source_corpora=[side("s", "en", f"files/{src_file}")],
                    target_corpora=[side("t", "sw", target_location)],
                )
            ],
        )

    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    with pytest.raises(Exception) as refused:
        stub.StartBuild(request("/etc/passwd"), metadata=(("x-api-key", key),))
    assert "is not one of your files" in str(refused.value)
    reply = stub.StartBuild(request(f"files/{trg_file}/contents"), metadata=(("x-api-key", key),))
    assert reply == empty_pb2.Empty()
    assert train_files(api, "b" * 24) == (ENG_MAT, SWH_MAT)
    assert api.launcher.specs[-1].train is True


def test_grpc_start_build_records_its_choices_in_the_typed_model(
    api: RunningApi, owner: httpx.Client
) -> None:
    """Serval's `train_on_*` / `pretranslate_*` flags become the same entries a REST build stores:
    chapters as a scripture range, text ids as text ids, `…_all` as a whole corpus."""
    from serval_api.db.models import BuildRow

    engine = create_engine(owner)
    source_file = upload(owner, "MAT.txt", text(ENG_MAT))
    target_file = upload(owner, "MAT.txt", text([SWH_MAT[0]]))

    def files(file_id: str) -> list[engine_pb2.CorpusFile]:
        return [
            engine_pb2.CorpusFile(
                location=f"files/{file_id}", format=engine_pb2.FILE_FORMAT_TEXT, text_id="MAT"
            )
        ]

    source = engine_pb2.MonolingualCorpus(
        id="s",
        language="en",
        train_on_chapters={"MAT": engine_pb2.ScriptureChapters(chapters=[5, 1, 2, 3])},
        pretranslate_text_ids=["MAT"],
        files=files(source_file),
    )
    target = engine_pb2.MonolingualCorpus(id="t", language="sw", train_on_all=True, files=files(target_file))
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    stub.StartBuild(
        engine_pb2.StartBuildRequest(
            engine_type="Nmt",
            engine_id=engine["id"],
            build_id="c" * 24,
            corpora=[engine_pb2.ParallelCorpus(id="pc", source_corpora=[source], target_corpora=[target])],
        ),
        metadata=(("x-api-key", owner.headers["X-API-Key"]),),
    )

    assert train_files(api, "c" * 24) == ([ENG_MAT[0]], [SWH_MAT[0]])
    build = owner.get(f"/translation/engines/{engine['id']}/builds/{'c' * 24}").json()
    base = f"{api.rest_url}/api/v1"
    pc = {"id": "pc", "url": f"{base}/translation/engines/{engine['id']}/parallel-corpora/pc"}
    assert build["trainOn"] == [
        {
            "parallelCorpus": pc,
            "sourceFilters": [
                {"corpus": {"id": "s", "url": f"{base}/corpora/s"}, "scriptureRange": "MAT1-3;MAT5"}
            ],
            "targetFilters": [{"corpus": {"id": "t", "url": f"{base}/corpora/t"}}],
        }
    ]
    assert build["pretranslate"] == [
        {
            "parallelCorpus": pc,
            "sourceFilters": [{"corpus": {"id": "s", "url": f"{base}/corpora/s"}, "textIds": ["MAT"]}],
        }
    ]
    assert build["executionData"]["pretranslateCount"] == 2

    async def stored() -> tuple[Any, Any]:
        assert api.service.services is not None
        async with api.service.services.db.session() as s:
            row = await s.get(BuildRow, "c" * 24)
            assert row is not None
            return row.train_on, row.pretranslate

    assert api.run(stored()) == (
        [
            {
                "parallel_corpus_id": "pc",
                "source_filters": [{"corpus_id": "s", "scripture_range": "MAT1-3;MAT5"}],
                "target_filters": [{"corpus_id": "t"}],
            }
        ],
        [{"parallel_corpus_id": "pc", "source_filters": [{"corpus_id": "s", "text_ids": ["MAT"]}]}],
    )
