"""Data files uploaded before their contents moved to the database: a record with no chunk and the
contents in the model store at `files/{id}/contents`. They still read back, export into a build
(REST and gRPC), take new contents (which move them to the database) and delete, store copy and all."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.auth import ALL_SCOPES
from serval_api.service.file_contents import contents_key
from tests.api.conftest import RunningApi, create_engine
from tests.api.file_rows import as_uploaded_before, chunk_count
from tests.api.test_build_export import parallel_corpus, start, store, text, train_files, upload

SOURCE = ["In the beginning.", "And then."]
TARGET = ["Hapo mwanzo.", "Kisha."]


@pytest.fixture
def owner(api: RunningApi) -> Iterator[httpx.Client]:
    with api.client(scopes=ALL_SCOPES) as c:
        yield c


def old_file(api: RunningApi, client: httpx.Client, lines: list[str]) -> str:
    """A file made as the code before `data_file_chunks` made it. The upload first gives it a
    record; the chunks it wrote are then taken away and the contents put in the store."""
    file_id = upload(client, "MAT.txt", b"not what the store holds\n")
    as_uploaded_before(api, file_id, text(lines))
    assert chunk_count(api, file_id) == 0
    return file_id


def corpus_of(client: httpx.Client, language: str, file_id: str) -> str:
    response = client.post("/corpora", json={"language": language, "files": [{"fileId": file_id}]})
    assert response.status_code == 201, response.text
    corpus_id: str = response.json()["id"]
    return corpus_id


def test_an_old_file_reads_back_exports_into_a_build_and_deletes(
    api: RunningApi, owner: httpx.Client
) -> None:
    source, target = old_file(api, owner, SOURCE), old_file(api, owner, TARGET)
    assert owner.get(f"/files/{target}/contents").content == text(TARGET)
    assert owner.post(f"/files/{target}/contents").content == text(TARGET)

    engine = create_engine(owner)
    pc = parallel_corpus(owner, engine["id"], corpus_of(owner, "en", source), corpus_of(owner, "sw", target))
    build = start(owner, engine["id"], {"trainOn": [{"parallelCorpusId": pc}]})
    assert build.status_code == 201, build.text
    assert train_files(api, build.json()["id"]) == (SOURCE, TARGET)
    assert owner.post(f"/translation/engines/{engine['id']}/current-build/cancel").status_code == 200

    assert owner.delete(f"/files/{target}").status_code == 200
    assert owner.get(f"/files/{target}").status_code == 404
    assert not store(api).exists(contents_key(target)), "its store copy goes with it"
    assert store(api).exists(contents_key(source))


def test_an_old_file_exports_into_a_grpc_start_build(api: RunningApi, owner: httpx.Client) -> None:
    source, target = old_file(api, owner, SOURCE), old_file(api, owner, TARGET)
    engine = create_engine(owner)

    def side(corpus_id: str, language: str, file_id: str) -> engine_pb2.MonolingualCorpus:
        location = engine_pb2.CorpusFile(location=f"files/{file_id}", format=engine_pb2.FILE_FORMAT_TEXT)
        return engine_pb2.MonolingualCorpus(
            id=corpus_id, language=language, train_on_all=True, files=[location]
        )

    request = engine_pb2.StartBuildRequest(
        engine_type="Nmt",
        engine_id=engine["id"],
        build_id="b" * 24,
        corpora=[
            engine_pb2.ParallelCorpus(
                id="pc", source_corpora=[side("s", "en", source)], target_corpora=[side("t", "sw", target)]
            )
        ],
    )
    stub = engine_pb2_grpc.TranslationEngineApiStub(api.channel)
    stub.StartBuild(request, metadata=(("x-api-key", owner.headers["X-API-Key"]),))
    assert train_files(api, "b" * 24) == (SOURCE, TARGET)


def test_new_contents_move_an_old_file_to_the_database(api: RunningApi, owner: httpx.Client) -> None:
    file_id = old_file(api, owner, SOURCE)
    replaced = owner.patch(f"/files/{file_id}", files={"file": ("MAT.txt", text(TARGET))})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["revision"] == 2
    assert chunk_count(api, file_id) == 1
    assert not store(api).exists(contents_key(file_id)), "the old contents are not left behind"
    assert owner.get(f"/files/{file_id}/contents").content == text(TARGET)
