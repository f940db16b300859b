"""Serval's own client against this service: every translation operation of the generated
`Serval.Client` (tests/conformance/serval_client.py), of both releases a server must satisfy (the
client of Serval's last gRPC release and 1.20), called in a sensible order as an ordinary REST
client with an API key, for an `echo` and an `nmt` engine (and `smt-transfer`), and every
word-alignment operation for a `statistical` engine. One walk serves both releases: each call is
checked against each release that has its operation. Each call must answer a status the client
accepts, with a body the client can deserialize. 1.20's `ApiKeys` operations are an
administrator's: the walk's administrator makes a key for the walk's owner with them, the key
works as that owner, and Delete revokes it.

The echo walk needs no inference node, so it runs on both databases. The nmt walk runs a real
inference node process with the tiny NLLB model; its build is played through the platform gRPC API
with the build's job token (model published, pretranslations streamed), as a build job would. The
smt-transfer and statistical walks run the real build job (`python -m build_jobs run`, training
Thot models on a few hundred verse pairs) and a real inference node serving their family.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import ctranslate2
import httpx
import pytest

from serval_api.auth import ADMIN, ALL_SCOPES, GRANTABLE_SCOPES
from serval_api.builds.local import job_environment
from serval_api.service.keys import create_node_token
from serval_cli import processes
from serval_common.manifest import Manifest, publish_folder
from serval_common.store import open_store
from tests.api.conftest import RunningApi
from tests.api.test_pretranslations import Job
from tests.api.test_word_alignment import export as word_align_export
from tests.conformance.report import BodyCheck, Report, Walker
from tests.conformance.serval_client import (
    BASE_PATH,
    RELEASES,
    TRANSLATION_OPERATIONS_OF,
    WORD_ALIGNMENT_OPERATIONS,
)
from tests.helpers import EBIBLE, unavailable

SEGMENT = "Blessed are the peacemakers, for they shall be called children of God."
OWNER = "owner-a"
"""The walk's client: the owner of its API key."""
BASE_MODEL = "walk-base"
"""The base model the nmt and echo walks' first build names as its `model` (1.20)."""
BOOKS = {"MAT": (1, 3), "MRK": (1072, 2)}
"""Lines of the shared NT corpus (first line, count): MAT 1:1–3 and MRK 1:1–2."""
E = "TranslationEngines"


def verses(name: str, book: str) -> list[str]:
    first, count = BOOKS[book]
    lines = (EBIBLE / name).read_text(encoding="utf-8").split("\n")
    return lines[first - 1 : first - 1 + count]


def text_file(lines: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode()


def paratext_project(lines: list[str]) -> bytes:
    """A Paratext project zip as sil-machine reads it: Settings.xml and one USFM book, MAT."""
    settings = (
        "<ScriptureText><Name>CNF</Name><Encoding>65001</Encoding><Versification>4</Versification>"
        '<Naming PrePart="" PostPart="CNF.SFM" BookNameForm="MAT" /></ScriptureText>'
    )
    usfm = "\\id MAT\n\\c 1\n\\p\n" + "".join(f"\\v {n} {line}\n" for n, line in enumerate(lines, 1))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("Settings.xml", settings)
        archive.writestr("MATCNF.SFM", usfm)
    return buffer.getvalue()


def client_date(moment: datetime) -> str:
    """The generated client's format for `created-after` and `finished-after`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


class HookReceiver:
    """A loopback endpoint a webhook can deliver to; it keeps what it was sent."""

    def __init__(self) -> None:
        received = self.received = list[tuple[dict[str, str], bytes]]()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                received.append((dict(self.headers), self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/serval-hooks"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def hooks() -> Iterator[HookReceiver]:
    receiver = HookReceiver()
    try:
        yield receiver
    finally:
        receiver.close()


def only_text(text_id: str) -> BodyCheck:
    """The rows a `text-id` (or `{textId}`) filter leaves must all be of that text."""

    def problems(rows: Any) -> list[str]:
        texts = (
            {row.get("textId") if isinstance(row, dict) else None for row in rows}
            if isinstance(rows, list)
            else set()
        )
        other = sorted(str(t) for t in texts - {text_id})
        return [f"$: rows of {other} though the client asked for text {text_id}"] if other else []

    return problems


def lists_build(build_id: str) -> BodyCheck:
    """The feed without its filter would list it too; with `created-after` before the build it must."""

    def problems(builds: Any) -> list[str]:
        ids = [b.get("id") for b in builds if isinstance(b, dict)] if isinstance(builds, list) else []
        return [] if build_id in ids else [f"$: build {build_id} is not in the feed"]

    return problems


def finished(build: Any) -> list[str]:
    state = build.get("state") if isinstance(build, dict) else None
    return [] if state in ("Completed", "Faulted", "Canceled") else [f"$.state: {state!r} is not finished"]


def lists_key(key_id: str) -> BodyCheck:
    def problems(keys: Any) -> list[str]:
        ids = [k.get("id") for k in keys if isinstance(k, dict)] if isinstance(keys, list) else []
        owners = {k.get("clientId") for k in keys if isinstance(k, dict)} if isinstance(keys, list) else set()
        found = [] if key_id in ids else [f"$: key {key_id} is not listed"]
        return found + (
            [] if owners <= {OWNER} else [f"$: keys of {sorted(owners - {OWNER})} for clientId {OWNER}"]
        )

    return problems


def confidences_of(pretranslations: list[Any]) -> BodyCheck:
    """One entry per pretranslation of the corpus, in order, each with its confidence (or -1)."""

    def problems(entries: Any) -> list[str]:
        if not isinstance(entries, list):
            return []
        expected = [(p["sourceRefs"], p["targetRefs"], p["confidence"]) for p in pretranslations]
        found = [
            (e.get("sourceRefs"), e.get("targetRefs"), e.get("confidence"))
            for e in entries
            if isinstance(e, dict)
        ]
        if [f[:2] for f in found] != [e[:2] for e in expected]:
            return [f"$: {len(found)} entries, not the corpus's {len(expected)} pretranslations in order"]
        wrong = [f for f, e in zip(found, expected, strict=True) if f[2] != (e[2] if e[2] > 0 else -1)]
        return [f"$: confidences {wrong[:3]} differ from the pretranslations'"] if wrong else []

    return problems


def execution_data_1_20(build: Any) -> list[str]:
    """1.20's execution data of the walk's first build, once completed: the verses of Scripture it
    pretranslated (MAT of the Paratext corpora), no chapter filter, its diagnostics, its average."""
    if not isinstance(build, dict) or build.get("state") != "Completed":
        return []
    data = build.get("executionData") or {}
    problems = []
    if not (data.get("pretranslateVerseCount") or {}).get("MAT"):
        problems.append(
            f"$.executionData.pretranslateVerseCount: no MAT verses: {data.get('pretranslateVerseCount')}"
        )
    if data.get("isPretranslateFilteredByChapter") is not False:
        problems.append("$.executionData.isPretranslateFilteredByChapter: not false")
    if not isinstance(data.get("diagnostics"), list) or data.get("diagnosticsTruncated") is not False:
        problems.append("$.executionData.diagnostics: missing")
    average = data.get("averagePretranslationConfidence")
    if not (isinstance(average, float | int) and 0 < average <= 1):
        problems.append(f"$.executionData.averagePretranslationConfidence: {average!r}")
    return problems


def usfm_text(response: httpx.Response) -> list[str]:
    return [] if response.text.startswith("\\id MAT") else [f"not USFM of MAT: {response.text[:120]!r}"]


class Scenario:
    """The walk over every operation for one engine type. `complete_build` plays the build job
    where the engine type needs one (nmt); `warm_up` waits until the engine can translate."""

    def __init__(
        self,
        api: RunningApi,
        walker: Walker,
        engine_type: str,
        training_pairs: int = 0,
        admin: httpx.Client | None = None,
    ) -> None:
        """`training_pairs`: verse pairs of a training corpus the first build trains on (an engine
        type without a base model to start from, such as smt-transfer); 0: it trains on nothing.
        `admin`: an administrator's client, for 1.20's `ApiKeys` operations."""
        self.api = api
        self.w = walker
        self.engine_type = engine_type
        self.training_pairs = training_pairs
        self.admin = admin

    def run(
        self,
        hook_url: str,
        complete_build: Callable[[dict[str, Any]], None] | None = None,
        warm_up: Callable[[str], None] | None = None,
        after_train_segment: Callable[[str], None] | None = None,
    ) -> None:
        w = self.w
        began = datetime.now(UTC) - timedelta(seconds=2)

        w.call("Status.GetPing")
        w.call("Status.GetHealth")
        w.call("Status.GetDeploymentInfo")

        expires = (datetime.now(UTC) + timedelta(days=1)).isoformat()
        key_config = {
            "clientId": OWNER,
            "name": "conformance",
            "scopes": sorted(GRANTABLE_SCOPES),
            "expiresAt": expires,
        }
        created_key = w.call("ApiKeys.Create", json_body=key_config, client=self.admin)
        key_id = w.id_of(created_key, "api-key")
        w.call("ApiKeys.GetAll", query={"clientId": OWNER}, client=self.admin, extra_check=lists_key(key_id))
        w.call("ApiKeys.Get", {"id": key_id}, client=self.admin)

        hook = w.call(
            "Webhooks.Create",
            json_body={
                "payloadUrl": hook_url,
                "secret": "conformance-secret",
                "events": ["TranslationBuildStarted", "TranslationBuildFinished"],
            },
        )
        hook_id = w.id_of(hook, "hook")
        w.call("Webhooks.GetAll")
        w.call("Webhooks.Get", {"id": hook_id})

        files = {
            "en-MAT": self.upload("MAT.txt", text_file(verses("engwebp.txt", "MAT"))),
            "en-MRK": self.upload("MRK.txt", text_file(verses("engwebp.txt", "MRK"))),
            "sw-MAT": self.upload("MAT.txt", text_file(verses("swh1850.txt", "MAT")[:1])),
            "sw-MRK": self.upload("MRK.txt", text_file(verses("swh1850.txt", "MRK")[:1])),
            "en-pt": self.upload("en.zip", paratext_project(verses("engwebp.txt", "MAT")), "Paratext"),
            "sw-pt": self.upload("sw.zip", paratext_project(verses("swh1850.txt", "MAT")[:1]), "Paratext"),
        }
        w.call("DataFiles.GetAll")
        w.call("DataFiles.Get", {"id": files["en-MRK"]})
        w.call(
            "DataFiles.Update",
            {"id": files["en-MRK"]},
            files={"file": ("MRK.txt", text_file(verses("engwebp.txt", "MRK")))},
        )
        expected_bytes = text_file(verses("engwebp.txt", "MAT"))
        w.call(
            "DataFiles.Download",
            {"id": files["en-MAT"]},
            extra_check=lambda r: [] if r.content == expected_bytes else [f"other bytes: {r.content[:80]!r}"],
        )

        text_refs = {
            lang: [{"fileId": files[f"{lang}-{book}"], "textId": book} for book in BOOKS]
            for lang in ("en", "sw")
        }
        corpora = {lang: self.corpus(lang, text_refs[lang]) for lang in ("en", "sw")}
        corpora |= {
            f"{lang}-pt": self.corpus(lang, [{"fileId": files[f"{lang}-pt"]}]) for lang in ("en", "sw")
        }
        w.call("Corpora.GetAll")
        w.call("Corpora.Get", {"id": corpora["en"]})
        w.call("Corpora.Update", {"id": corpora["en"]}, json_body=text_refs["en"])

        engine_config: dict[str, Any] = {
            "name": f"conformance {self.engine_type}",
            "sourceLanguage": "en",
            "targetLanguage": "sw",
            "type": self.engine_type,
        }
        if self.engine_type == "nmt":
            engine_config["isModelPersisted"] = True
        engine_id = w.id_of(w.call(f"{E}.Create", json_body=engine_config), "engine")
        engine = {"id": engine_id}
        w.call(f"{E}.GetAll")
        if created_key.is_success:  # the key made over the API acts as the walk's owner
            with self.as_key(created_key.json()["key"]) as made:
                seen = made.get(f"{BASE_PATH}/translation/engines/{engine_id}")
                assert seen.status_code == 200, f"a key made with ApiKeys.Create: {seen.text}"
        w.call(f"{E}.Get", engine)
        w.call(f"{E}.Update", engine, json_body={"sourceLanguage": "en", "targetLanguage": "sw"})

        w.call("TranslationEngineTypes.GetQueue", {"engineType": self.engine_type})
        w.call("TranslationEngineTypes.GetLanguageInfo", {"engineType": self.engine_type, "language": "sw"})

        pc_body = {"sourceCorpusIds": [corpora["en"]], "targetCorpusIds": [corpora["sw"]]}
        text_pc = w.id_of(
            w.call(f"{E}.AddParallelCorpus", engine, json_body={"name": "text", **pc_body}), "text-pc"
        )
        paratext_pc = w.id_of(
            w.call(
                f"{E}.AddParallelCorpus",
                engine,
                json_body={
                    "name": "paratext",
                    "sourceCorpusIds": [corpora["en-pt"]],
                    "targetCorpusIds": [corpora["sw-pt"]],
                },
            ),
            "paratext-pc",
        )
        w.call(f"{E}.GetAllParallelCorpora", engine)
        w.call(f"{E}.GetParallelCorpus", {**engine, "parallelCorpusId": text_pc})
        w.call(f"{E}.UpdateParallelCorpus", {**engine, "parallelCorpusId": text_pc}, json_body=pc_body)

        corpus_files = {
            "sourceFiles": [{"fileId": files["en-pt"], "textId": "MAT"}],
            "targetFiles": [{"fileId": files["sw-pt"], "textId": "MAT"}],
        }
        added = w.call(
            f"{E}.AddCorpus",
            engine,
            json_body={"name": "legacy", "sourceLanguage": "en", "targetLanguage": "sw", **corpus_files},
        )
        engine_corpus = w.id_of(added, "engine-corpus")
        w.call(f"{E}.GetAllCorpora", engine)
        w.call(f"{E}.GetCorpus", {**engine, "corpusId": engine_corpus})
        w.call(f"{E}.UpdateCorpus", {**engine, "corpusId": engine_corpus}, json_body=corpus_files)

        pretranslate: list[dict[str, Any]] = [
            {"parallelCorpusId": text_pc},
            {"parallelCorpusId": paratext_pc},
        ]
        if added.is_success:
            pretranslate.append({"corpusId": engine_corpus})
        train_on: list[dict[str, Any]] = []
        if self.training_pairs:
            train_on.append({"parallelCorpusId": self.training_corpus(engine, files, corpora)})
        first: dict[str, Any] = {"name": "first", "trainOn": train_on, "pretranslate": pretranslate}
        if self.engine_type in ("nmt", "echo"):
            self.publish_base_model()
            first["model"] = BASE_MODEL
        started = w.call(f"{E}.StartBuild", engine, json_body=first)
        build_id = w.id_of(started, "build")
        if complete_build is not None and started.is_success:
            complete_build(started.json())
        build = w.call(f"{E}.GetBuild", {**engine, "buildId": build_id})
        if build.is_success:
            w.call(
                f"{E}.GetBuild",
                {**engine, "buildId": build_id},
                query={"min-revision": str(build.json()["revision"])},
                extra_check=execution_data_1_20,
            )
        w.call(f"{E}.GetAllBuilds", engine)
        w.call(
            "TranslationBuilds.GetAllBuildsCreatedAfter",
            query={"created-after": client_date(began)},
            extra_check=lists_build(build_id),
        )
        w.call(
            "TranslationBuilds.GetNextFinishedBuild",
            query={"finished-after": client_date(began)},
            extra_check=lambda b: finished(b) + execution_data_1_20(b),
        )

        if warm_up is not None:
            warm_up(engine_id)
        w.call(f"{E}.Translate", engine, json_body=SEGMENT, send_json=True, timeout_s=60)
        w.call(f"{E}.TranslateN", {**engine, "n": "3"}, json_body=SEGMENT, send_json=True, timeout_s=60)
        w.call(f"{E}.GetWordGraph", engine, json_body=SEGMENT, send_json=True, timeout_s=60)
        w.call(
            f"{E}.TrainSegment",
            engine,
            json_body={"sourceSegment": SEGMENT, "targetSegment": "Heri wapatanishi.", "sentenceStart": True},
        )
        if after_train_segment is not None:
            after_train_segment(engine_id)
        w.call(f"{E}.GetModelDownloadUrl", engine)

        usfm_query = {
            "text-origin": "OnlyPretranslated",
            "template": "Source",
            "paragraph-marker-behavior": "Preserve",
            "embed-behavior": "Preserve",
            "style-marker-behavior": "Strip",
            "quotation-mark-behavior": "Denormalized",
        }
        text = {**engine, "parallelCorpusId": text_pc}
        w.call(f"{E}.GetAllPretranslations", text, query={"text-id": "MAT"}, extra_check=only_text("MAT"))
        every = self.w.client.get(
            f"{BASE_PATH}/translation/engines/{engine_id}/parallel-corpora/{text_pc}/pretranslations"
        )
        w.call(
            f"{E}.GetAllPretranslationConfidences",
            text,
            extra_check=confidences_of(every.json() if every.is_success else []),
        )
        w.call(f"{E}.GetPretranslationsByTextId", {**text, "textId": "MRK"}, extra_check=only_text("MRK"))
        w.call(
            f"{E}.GetPretranslatedUsfm",
            {**engine, "parallelCorpusId": paratext_pc, "textId": "MAT"},
            query=usfm_query,
            extra_check=usfm_text,
        )
        legacy = {**engine, "corpusId": engine_corpus}
        w.call(
            f"{E}.GetAllCorpusPretranslations", legacy, query={"text-id": "MAT"}, extra_check=only_text("MAT")
        )
        w.call(
            f"{E}.GetCorpusPretranslationsByTextId", {**legacy, "textId": "MAT"}, extra_check=only_text("MAT")
        )
        w.call(
            f"{E}.GetCorpusPretranslatedUsfm",
            {**legacy, "textId": "MAT"},
            query=usfm_query,
            extra_check=usfm_text,
        )

        w.call(f"{E}.StartBuild", engine, json_body={"name": "to cancel"})
        w.call(f"{E}.GetCurrentBuild", engine)
        w.call(f"{E}.CancelBuild", engine)

        w.call(f"{E}.DeleteCorpus", {**engine, "corpusId": engine_corpus}, query={"delete-files": "false"})
        w.call(f"{E}.DeleteParallelCorpus", {**engine, "parallelCorpusId": paratext_pc})
        w.call("Webhooks.Delete", {"id": hook_id})
        w.call("ApiKeys.Delete", {"id": key_id}, client=self.admin)
        if created_key.is_success:  # revoked at once
            with self.as_key(created_key.json()["key"]) as revoked:
                assert revoked.get(f"{BASE_PATH}/translation/engines").status_code == 401
        w.call(f"{E}.Delete", engine)
        for corpus_id in corpora.values():
            w.call("Corpora.Delete", {"id": corpus_id})
        for file_id in files.values():
            w.call("DataFiles.Delete", {"id": file_id})

    def training_corpus(self, engine: dict[str, str], files: dict[str, str], corpora: dict[str, str]) -> str:
        """A parallel corpus of `training_pairs` verses (the NT's first, a book of their own: TRN);
        its files and corpora join `files` and `corpora`, so the walk deletes them too."""
        for lang, name in (("en", "engwebp.txt"), ("sw", "swh1850.txt")):
            lines = (EBIBLE / name).read_text(encoding="utf-8").split("\n")[: self.training_pairs]
            files[f"{lang}-train"] = self.upload("TRN.txt", text_file(lines))
            refs = [{"fileId": files[f"{lang}-train"], "textId": "TRN"}]
            corpora[f"{lang}-train"] = self.corpus(lang, refs)
        body = {
            "name": "train",
            "sourceCorpusIds": [corpora["en-train"]],
            "targetCorpusIds": [corpora["sw-train"]],
        }
        return self.w.id_of(self.w.call(f"{E}.AddParallelCorpus", engine, json_body=body), "train-pc")

    def as_key(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.api.rest_url, headers={"X-API-Key": key}, timeout=30)

    def publish_base_model(self) -> None:
        """A base model an administrator published, for the build's `model` to name (the walk's
        nmt build job is played, so its weights are never read)."""
        folder = self.api.service.settings.home / BASE_MODEL
        folder.mkdir(exist_ok=True)
        (folder / "model.bin").write_bytes(b"walk")
        store = open_store((self.api.service.settings.home / "store").resolve().as_uri())
        publish_folder(
            store, f"base-models/{BASE_MODEL}", folder, Manifest(kind="base-model", name=BASE_MODEL)
        )

    def upload(self, name: str, data: bytes, file_format: str = "Text") -> str:
        response = self.w.call(
            "DataFiles.Create", files={"file": (name, data)}, data={"format": file_format, "name": name}
        )
        return self.w.id_of(response, name)

    def corpus(self, language: str, files: list[dict[str, str]]) -> str:
        response = self.w.call(
            "Corpora.Create", json_body={"name": language, "language": language, "files": files}
        )
        return self.w.id_of(response, f"corpus-{language}")


def rest_client(api: RunningApi) -> httpx.Client:
    """An ordinary client: the service's root URL and an API key with every scope."""
    return httpx.Client(
        base_url=api.rest_url, headers={"X-API-Key": api.api_key(OWNER, scopes=ALL_SCOPES)}, timeout=30
    )


def admin_client(api: RunningApi) -> httpx.Client:
    """An administrator's client (1.20's `ApiKeys` operations need key management's scopes)."""
    return httpx.Client(
        base_url=api.rest_url,
        headers={"X-API-Key": api.api_key("administrator", scopes=(ADMIN,))},
        timeout=30,
    )


def assert_conformant(walker: Walker, report: Report) -> None:
    for release in RELEASES:
        missing = TRANSLATION_OPERATIONS_OF[release] - walker.called(release)
        assert not missing, f"operations of the {release} client the walk never called: {sorted(missing)}"
    failures = report.failures(walker.engine_type)
    assert not failures, f"{len(failures)} problems for {walker.engine_type}:\n" + "\n".join(failures)


def test_echo_engine(api: RunningApi, report: Report, hooks: HookReceiver) -> None:
    with rest_client(api) as client, admin_client(api) as admin:
        walker = Walker(client, "echo", report)
        Scenario(api, walker, "echo", admin=admin).run(hooks.url)
    assert_conformant(walker, report)


def start_node(api: RunningApi, home: Path) -> subprocess.Popen[bytes]:
    assert api.service.services is not None
    _, token = api.run(create_node_token(api.service.services.db, "conformance"))
    store = (api.service.settings.home / "store").resolve().as_uri()
    return processes.start(
        ["node", "--home", str(home), "--api-address", api.grpc_target, "--node-id", "conformance"],
        home / "node.log",
        {"SERVAL_NODE__TOKEN": token, "SERVAL_STORE__URL": store},
    )


def play_nmt_build(api: RunningApi, model_dir: Path) -> Callable[[dict[str, Any]], None]:
    """What an inference-only build job does: started, the model revision published, the
    pretranslations of the export streamed, completed."""

    def complete(build: dict[str, Any]) -> None:
        spec = api.launcher.specs[-1]
        assert spec.build_id == build["id"]
        job = Job(api, build)
        job.started()
        manifest = Manifest(
            kind="model-revision",
            engine_id=spec.engine_id,
            revision=spec.revision,
            build_id=spec.build_id,
            source_language="eng_Latn",
            target_language="swh_Latn",
            ctranslate2_version=ctranslate2.__version__,
            quantization="int8",
        )
        store = open_store((api.service.settings.home / "store").resolve().as_uri())
        publish_folder(store, f"models/{spec.engine_id}/{spec.revision}", model_dir, manifest)
        rows = job.source_rows()
        job.insert([{**row, "translation": f"Tafsiri {n}.", "confidence": 0.5} for n, row in enumerate(rows)])
        job.completed()

    return complete


def wait_until_serving(
    client: httpx.Client, kind: str, operation: str, body: Any, timeout_s: float
) -> Callable[[str], None]:
    """Until a node has joined and loaded the engine's revision: `operation` of
    `{kind}/engines/{id}` stops answering 409 or 503. Not recorded: the walk's own call is the
    one checked."""

    def wait(engine_id: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = client.post(
                f"{BASE_PATH}/{kind}/engines/{engine_id}/{operation}", json=body, timeout=60
            ).status_code
            if status == 200 or status not in (409, 503):
                return
            time.sleep(0.25)

    return wait


def wait_until_translating(client: httpx.Client, timeout_s: float = 90) -> Callable[[str], None]:
    return wait_until_serving(client, "translation", "translate", SEGMENT, timeout_s)


@pytest.mark.sqlite_pass_only
def test_nmt_engine(
    api: RunningApi, report: Report, hooks: HookReceiver, tiny_ct2_model: Path, tmp_path: Path
) -> None:
    node = start_node(api, tmp_path / "node")
    try:
        with rest_client(api) as client, admin_client(api) as admin:
            walker = Walker(client, "nmt", report)
            Scenario(api, walker, "nmt", admin=admin).run(
                hooks.url,
                complete_build=play_nmt_build(api, tiny_ct2_model),
                warm_up=wait_until_translating(client),
            )
    finally:
        processes.stop(node)
    assert_conformant(walker, report)


W = "WordAlignmentEngines"
ALIGN = f"{W}.Align"
WORD_ALIGN_LINES = 1100
"""Lines of the NT (its first) that the statistical walk's corpus holds as text NT besides MAT and
MRK: more than 1,024 pairs to align, where machine.py's job stops."""
LANGUAGES = (("en", "engwebp.txt"), ("sw", "swh1850.txt"))
ALIGNMENT_OPTIONS = {"modelType": "eflomal", "iterations": 2, "maxSegments": 300}
"""A build of a few seconds: eflomal with 2 iterations a stage, trained on 300 of the pairs."""


def links(row: Any) -> dict[tuple[str, str], float]:
    """The word pairs a WordAlignmentResult (or a WordAlignment row) links, with their scores."""
    return {
        (row["sourceTokens"][pair["sourceIndex"]], row["targetTokens"][pair["targetIndex"]]): pair["score"]
        for pair in row["alignment"]
    }


def alignment_problems(rows: Any) -> list[str]:
    """Every link of every row (a result or a list of rows) has indices within the row's tokens
    and a probability as its score; a row with words on both sides has links."""
    problems: list[str] = []
    for n, row in enumerate(rows if isinstance(rows, list) else [rows]):
        if not isinstance(row, dict):
            problems.append(f"$[{n}]: not an object")
            continue
        sources, targets = len(row.get("sourceTokens") or []), len(row.get("targetTokens") or [])
        pairs = row.get("alignment") or []
        if sources and targets and not pairs:
            problems.append(f"$[{n}]: no links between {sources} and {targets} tokens")
        for pair in pairs:
            if not (
                0 <= pair.get("sourceIndex", -1) < sources and 0 <= pair.get("targetIndex", -1) < targets
            ):
                problems.append(f"$[{n}]: link {pair} outside {sources}×{targets} tokens")
            if not (isinstance(pair.get("score"), float | int) and 0 <= pair["score"] <= 1):
                problems.append(f"$[{n}]: link {pair} has no probability as its score")
    return problems


class AlignmentScenario:
    """Every word-alignment operation for a `statistical` engine: a real build job trains an aligner
    on a parallel corpus of MAT 1:1–3, MRK 1:1–2 and the NT's first `WORD_ALIGN_LINES` lines and
    aligns all of it (more than 1,024 rows); a real inference node aligns live."""

    def __init__(self, api: RunningApi, walker: Walker) -> None:
        self.api = api
        self.w = walker

    def run(self, complete_build: Callable[[dict[str, Any]], None], warm_up: Callable[[str], None]) -> None:
        w = self.w
        shared = Scenario(self.api, w, "statistical")
        texts = {lang: {book: verses(name, book) for book in BOOKS} for lang, name in LANGUAGES}
        for lang, name in LANGUAGES:
            texts[lang]["NT"] = (EBIBLE / name).read_text(encoding="utf-8").split("\n")[:WORD_ALIGN_LINES]
        files = {
            f"{lang}-{book}": shared.upload(f"{book}.txt", text_file(lines))
            for lang, books in texts.items()
            for book, lines in books.items()
        }
        corpora = {
            lang: shared.corpus(lang, [{"fileId": files[f"{lang}-{book}"], "textId": book} for book in books])
            for lang, books in texts.items()
        }
        engine_config = {
            "name": "conformance",
            "sourceLanguage": "en",
            "targetLanguage": "sw",
            "type": "statistical",
            "isModelPersisted": True,
        }
        engine = {"id": w.id_of(w.call(f"{W}.Create", json_body=engine_config), "engine")}
        w.call(f"{W}.GetAll")
        w.call(f"{W}.Get", engine)
        w.call("WordAlignmentEngineTypes.GetQueue", {"engineType": "statistical"})

        pc_body = {"sourceCorpusIds": [corpora["en"]], "targetCorpusIds": [corpora["sw"]]}
        pc_id = w.id_of(
            w.call(f"{W}.AddParallelCorpus", engine, json_body={"name": "bible", **pc_body}), "pc"
        )
        w.call(f"{W}.GetAllParallelCorpora", engine)
        w.call(f"{W}.GetParallelCorpus", {**engine, "parallelCorpusId": pc_id})
        w.call(f"{W}.UpdateParallelCorpus", {**engine, "parallelCorpusId": pc_id}, json_body=pc_body)

        started = w.call(
            f"{W}.StartBuild",
            engine,
            json_body={
                "name": "first",
                "trainOn": [{"parallelCorpusId": pc_id}],
                "wordAlignOn": [{"parallelCorpusId": pc_id}],
                "options": ALIGNMENT_OPTIONS,
            },
        )
        build_id = w.id_of(started, "build")
        assert started.is_success, started.text
        exported = word_align_export(self.api, build_id)
        complete_build(started.json())
        build = w.call(f"{W}.GetBuild", {**engine, "buildId": build_id}, extra_check=finished)
        assert build.json()["state"] == "Completed", build.text
        revision = str(build.json()["revision"])
        w.call(f"{W}.GetBuild", {**engine, "buildId": build_id}, query={"min-revision": revision})
        w.call(f"{W}.GetAllBuilds", engine)
        execution = build.json()["executionData"]
        assert execution["wordAlignCount"] == len(exported) > 1024, (execution, len(exported))
        assert execution["trainCount"] == ALIGNMENT_OPTIONS["maxSegments"], "the pairs trained on"

        every = w.call(
            f"{W}.GetAllWordAlignments", {**engine, "corpusId": pc_id}, extra_check=alignment_problems
        )
        rows = every.json()
        assert [(r["textId"], r["sourceRefs"]) for r in rows] == [
            (r["textId"], r["sourceRefs"]) for r in exported
        ], "every exported pair is served, in order: none past the 1,024th is dropped"
        assert rows[0]["sourceRefs"] == ["MAT:1"] and ("Jesus", "Yesu") in links(rows[0]), rows[0]
        mrk = w.call(
            f"{W}.GetAllWordAlignments",
            {**engine, "corpusId": pc_id},
            query={"text-id": "MRK"},
            extra_check=lambda body: only_text("MRK")(body) + alignment_problems(body),
        )
        assert len(mrk.json()) == BOOKS["MRK"][1]

        warm_up(engine["id"])
        source, target = (texts[lang]["MAT"][0] for lang in ("en", "sw"))
        aligned = w.call(
            ALIGN,
            engine,
            json_body={"sourceSegment": source, "targetSegment": target},
            extra_check=alignment_problems,
        )
        assert aligned.status_code == 200, aligned.text
        assert links(aligned.json()).get(("Jesus", "Yesu"), 0) > 0.5, aligned.json()
        served = {key: rows[0][key] for key in ("sourceTokens", "targetTokens", "alignment")}
        assert aligned.json() == served, "the node aligns with the revision the build published"

        w.call(f"{W}.StartBuild", engine, json_body={"name": "to cancel"})
        w.call(f"{W}.GetCurrentBuild", engine)
        w.call(f"{W}.CancelBuild", engine)
        w.call(f"{W}.DeleteParallelCorpus", {**engine, "parallelCorpusId": pc_id})
        w.call(f"{W}.Delete", engine)


def wait_until_aligning(client: httpx.Client, timeout_s: float = 90) -> Callable[[str], None]:
    """Until the node has joined and loaded the revision (not recorded: the walk's own Align call
    is the one checked)."""
    return wait_until_serving(
        client, "word-alignment", "align", {"sourceSegment": "Jesus", "targetSegment": "Yesu"}, timeout_s
    )


@pytest.mark.sqlite_pass_only
def test_statistical_engine(api: RunningApi, report: Report, tmp_path: Path) -> None:
    """The walk for a `statistical` engine: the real build job (`python -m build_jobs run`, which
    trains a Thot aligner and streams its alignments of every pair) and a real inference node
    serving the family for Align."""
    reason = family_unavailable("statistical")
    if reason is not None:
        unavailable(reason)
    node = start_node(api, tmp_path / "node")
    try:
        with rest_client(api) as client:
            walker = Walker(client, "statistical", report)
            AlignmentScenario(api, walker).run(run_build_job(api), wait_until_aligning(client))
    finally:
        processes.stop(node)
    for release in RELEASES:
        called = walker.called(release) & WORD_ALIGNMENT_OPERATIONS
        assert called == WORD_ALIGNMENT_OPERATIONS, (
            f"not called: {sorted(WORD_ALIGNMENT_OPERATIONS - called)}"
        )
        assert walker.called(release) - WORD_ALIGNMENT_OPERATIONS == {"DataFiles.Create", "Corpora.Create"}
    failures = report.failures("statistical")
    assert not failures, f"{len(failures)} problems for statistical:\n" + "\n".join(failures)


BUILD_TIMEOUT_S = 600
SMT_TRAINING_PAIRS = 300


def run_build_job(api: RunningApi) -> Callable[[dict[str, Any]], None]:
    """The build job itself, as the local launcher runs it (`python -m build_jobs run` with the
    job's environment), reporting to this API service through the platform gRPC API."""

    def complete(build: dict[str, Any]) -> None:
        spec = api.launcher.specs[-1]
        assert spec.build_id == build["id"]
        spec = dataclasses.replace(spec, api_address=api.grpc_target)
        job = subprocess.run(
            [sys.executable, "-m", "build_jobs", *spec.command_args()],
            env=job_environment(api.service.settings, spec),
            capture_output=True,
            timeout=BUILD_TIMEOUT_S,
        )
        tail = job.stdout.decode(errors="replace")[-3000:] + job.stderr.decode(errors="replace")[-3000:]
        assert job.returncode == 0, f"the {spec.engine_type} build job failed ({job.returncode}):\n{tail}"

    return complete


FAMILY_MODULES = {
    "smt-transfer": ("inference_gpu.families.smt.model", "build_jobs.smt.build"),
    "statistical": ("inference_gpu.families.alignment", "build_jobs.alignment.job"),
}


def family_unavailable(family: str) -> str | None:
    """Why the walk of `family` cannot run here, or None: it needs the node's family and its build
    job (the `smt` extra: sil-machine and sil-thot)."""
    for module in FAMILY_MODULES[family]:
        try:
            importlib.import_module(module)
        except ImportError as e:
            return f"{module} does not import ({e}): no {family} node or build job here"
    from inference_gpu.families import available_families

    if family not in available_families():
        return f"this machine's inference node would not serve {family}"
    return None


LEARNED_VERSE = 5000
"""A line of the NT files past the training pairs: the verse the smt-transfer walk trains live."""


class SmtNode:
    """The walk's inference node process, which `learns_and_replays` restarts."""

    def __init__(self, api: RunningApi, home: Path) -> None:
        self.api = api
        self.home = home
        self.starts = 0
        self.process = self.start()

    def start(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        return start_node(self.api, self.home / f"node-{self.starts}")

    def restart(self) -> None:
        processes.stop(self.process)
        self.process = self.start()


def learns_and_replays(client: httpx.Client, node: SmtNode) -> Callable[[str], None]:
    """Train-segment changes the loaded model at once (the next translate is closer to the trained
    target), and a node started afterwards, replaying the engine's trained segments as it loads the
    revision, translates it the same."""

    def words(text: str) -> set[str]:
        return {w.strip(".,;:!?\"'").lower() for w in text.split()} - {""}

    def check(engine_id: str) -> None:
        source, target = (
            (EBIBLE / name).read_text(encoding="utf-8").split("\n")[LEARNED_VERSE - 1]
            for name in ("engwebp.txt", "swh1850.txt")
        )
        base = f"{BASE_PATH}/translation/engines/{engine_id}"

        def translate() -> str:
            response = client.post(f"{base}/translate", json=source, timeout=60)
            assert response.status_code == 200, response.text
            translation: str = response.json()["translation"]
            return translation

        before = translate()
        pair = {"sourceSegment": source, "targetSegment": target, "sentenceStart": True}
        assert client.post(f"{base}/train-segment", json=pair).status_code == 200
        learned = translate()
        assert len(words(learned) & words(target)) > len(words(before) & words(target)), (before, learned)
        node.restart()
        wait_until_translating(client)(engine_id)
        assert translate() == learned, "a node loading the revision replays the trained segments"

    return check


@pytest.mark.sqlite_pass_only
def test_smt_transfer_engine(api: RunningApi, report: Report, hooks: HookReceiver, tmp_path: Path) -> None:
    """The walk for an `smt-transfer` engine: the real build job (`python -m build_jobs run`, which
    trains a Thot model on a few hundred verse pairs) and a real inference node serving the family."""
    reason = family_unavailable("smt-transfer")
    if reason is not None:
        unavailable(reason)
    node = SmtNode(api, tmp_path)
    try:
        with rest_client(api) as client, admin_client(api) as admin:
            walker = Walker(client, "smt-transfer", report)
            Scenario(api, walker, "smt-transfer", training_pairs=SMT_TRAINING_PAIRS, admin=admin).run(
                hooks.url,
                complete_build=run_build_job(api),
                warm_up=wait_until_translating(client),
                after_train_segment=learns_and_replays(client, node),
            )
    finally:
        processes.stop(node.process)
    assert_conformant(walker, report)
