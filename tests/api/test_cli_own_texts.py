"""A translator's own texts through the CLI, against a real in-process API service: `serval train`
on two text files and on two Paratext projects (an echo engine, whose build runs in the service and
drafts each missing verse as its source), the drafts it saves as JSON and USFM, `serval engine` and
`serval files` with whole ids and `--json`, and the one-sentence errors: no API key, a service that
is down, `serval api` on a port in use."""

from __future__ import annotations

import json
import logging
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner, Result

from serval_api.auth import (
    CREATE_ENGINES,
    CREATE_FILES,
    DELETE_ENGINES,
    DELETE_FILES,
    READ_ENGINES,
    READ_FILES,
    UPDATE_ENGINES,
)
from serval_cli.main import app
from serval_cli.processes import free_port
from tests.api.conftest import RunningApi
from tests.helpers import verse_pairs
from tests.paratext import book_usfm, ebible_verses, project_zip

runner = CliRunner()
TRANSLATOR_SCOPES = (
    READ_ENGINES,
    CREATE_ENGINES,
    UPDATE_ENGINES,
    DELETE_ENGINES,
    READ_FILES,
    CREATE_FILES,
    DELETE_FILES,
)
"""docs/own-texts.md's key to train with, and the two deletes `test_engine_and_files_commands` makes."""
NO_KEY = "no API key: give yours with --api-key or the SERVAL_API_KEY environment variable"


def translator_key(api: RunningApi) -> str:
    return api.api_key(scopes=TRANSLATOR_SCOPES)


def serval(*args: str, api: RunningApi | None = None, key: str | None = None) -> Result:
    """`serval ARGS` in this process, with the service's URL and key as flags (none from the environment)."""
    flags = [] if api is None else ["--url", api.rest_url]
    flags += [] if key is None else ["--api-key", key]
    return runner.invoke(app, [*args, *flags], env={"SERVAL_API_KEY": None, "SERVAL_URL": None})


@pytest.mark.parametrize(
    "command",
    [["train"], ["engine", "create"], ["engine", "list"], ["engine", "show"], ["engine", "delete"],
     ["files", "upload"], ["files", "list"], ["files", "delete"]],
    ids=" ".join,
)  # fmt: skip
def test_help(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output, result.output


@pytest.fixture
def texts(tmp_path: Path) -> Iterator[tuple[Path, Path, list[str]]]:
    """Twelve English verses, and the Swahili of the first eight: the last four are to draft."""
    english, swahili = verse_pairs("engwebp", "swh1850", 12)
    source, target = tmp_path / "mat.en.txt", tmp_path / "mat.sw.txt"
    source.write_text("\n".join(english) + "\n", encoding="utf-8")
    target.write_text("\n".join(swahili[:8]) + "\n", encoding="utf-8")
    yield source, target, english


def test_train_on_two_text_files(
    api: RunningApi, client: httpx.Client, texts: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    source, target, english = texts
    drafts = tmp_path / "drafts.json"
    args = (
        "train",
        str(source),
        str(target),
        "-s",
        "en",
        "-t",
        "sw",
        "--type",
        "echo",
        "--drafts",
        str(drafts),
    )
    result = serval(*args, api=api, key=translator_key(api))
    assert result.exit_code == 0, result.output

    (engine,) = client.get("/translation/engines").json()
    (build,) = client.get(f"/translation/engines/{engine['id']}/builds").json()
    (parallel,) = client.get(f"/translation/engines/{engine['id']}/parallel-corpora").json()
    assert engine["name"] == "mat.en.txt → mat.sw.txt" and build["state"] == "Completed"
    for line in (
        f'created engine {engine["id"]} "mat.en.txt → mat.sw.txt" (en → sw, echo)',
        f"started build {build['id']}",
        f"parallel corpus {parallel['id']} ",
        f"build {build['id']} Completed",
        f"4 drafts (pretranslations) at {api.rest_url}/api/v1/translation/engines/{engine['id']}"
        f"/parallel-corpora/{parallel['id']}/pretranslations",
        f"saved the drafts as JSON to {drafts}",
    ):
        assert line in result.output, f"{line!r} (whole ids) not in:\n{result.output}"
    assert [c["parallelCorpus"]["id"] for c in (*build["trainOn"], *build["pretranslate"])] == [
        parallel["id"]
    ] * 2, "it trains on the new parallel corpus and drafts its missing verses"

    rows = json.loads(drafts.read_text(encoding="utf-8"))
    assert [row["sourceRefs"] for row in rows] == [[f"mat:{n}"] for n in range(9, 13)]
    assert [row["translation"] for row in rows] == english[8:], (
        "an echo build drafts each verse as its source"
    )

    usfm = serval(*args, "--usfm", str(tmp_path / "x.usfm"), api=api, key=translator_key(api))
    assert usfm.exit_code == 2 and "USFM drafts need a Paratext project zip" in usfm.output


def test_train_on_paratext_projects_saves_usfm(api: RunningApi, client: httpx.Client, tmp_path: Path) -> None:
    """The target project has Matthew 1 only: Mark 1 is drafted, and saved as USFM on the source's
    book (the target has none)."""
    mat_en, mrk_en = ebible_verses("engwebp", "MAT", [1]), ebible_verses("engwebp", "MRK", [1])
    mrk_en = dict(list(mrk_en.items())[:5])
    source, target = tmp_path / "WEB.zip", tmp_path / "SWH.zip"
    source.write_bytes(
        project_zip("WEB", "en", {"MAT": book_usfm("MAT", mat_en), "MRK": book_usfm("MRK", mrk_en)})
    )
    target.write_bytes(
        project_zip("SWH", "sw", {"MAT": book_usfm("MAT", ebible_verses("swh1850", "MAT", [1]))})
    )
    drafts, usfm = tmp_path / "out" / "drafts.json", tmp_path / "mark.usfm"
    drafts.parent.mkdir()
    key = translator_key(api)
    created = serval("engine", "create", "-s", "en", "-t", "sw", "--type", "echo", "--json", api=api, key=key)
    engine = json.loads(created.stdout)

    result = serval(
        "train", str(source), str(target), "--engine", engine["id"], "--drafts", str(drafts), "--usfm", str(usfm),
        api=api, key=key,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"using engine {engine['id']}" in result.output
    assert "uploaded WEB.zip as file" in result.output and "(Paratext)" in result.output
    rows = json.loads(drafts.read_text(encoding="utf-8"))
    assert {row["textId"] for row in rows} == {"MRK"}
    assert [row["translation"] for row in rows] == list(mrk_en.values())
    assert f"saved MRK as USFM to {usfm}" in result.output
    book = usfm.read_text(encoding="utf-8")
    assert book.startswith("\\id MRK")
    assert "\\rem This draft of MRK 1 was generated by AI from WEB" in book, book
    for (_, verse), text in mrk_en.items():
        assert f"\\v {verse} {text}" in book

    wrong = serval("train", str(source), str(target), "--engine", engine["id"], "-s", "fr", api=api, key=key)
    assert wrong.exit_code == 3 and f"engine {engine['id']} translates en → sw, not fr → sw" in wrong.output
    mixed = serval(
        "train",
        str(source),
        str(tmp_path / "out" / "drafts.json"),
        "--engine",
        engine["id"],
        api=api,
        key=key,
    )
    assert mixed.exit_code == 2 and "give two text files or two Paratext project zips" in mixed.output


def test_engine_and_files_commands(
    api: RunningApi, texts: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    """Whole ids when piped (tab-separated lines), and `--json` for scripts."""
    key = translator_key(api)
    created = serval(
        "engine", "create", "-s", "en", "-t", "sw", "--name", "Mark draft", "--json", api=api, key=key
    )
    assert created.exit_code == 0, created.output
    engine = json.loads(created.stdout)
    assert engine["name"] == "Mark draft" and engine["type"] == "nmt" and len(engine["id"]) >= 24

    listed = serval("engine", "list", api=api, key=key)
    header, row = listed.stdout.splitlines()
    assert header.split("\t")[0] == "engine"
    assert row.split("\t")[:3] == [engine["id"], "Mark draft", "en → sw"]
    assert [e["id"] for e in json.loads(serval("engine", "list", "--json", api=api, key=key).stdout)] == [
        engine["id"]
    ]
    shown = serval("engine", "show", engine["id"], api=api, key=key)
    assert re.search(rf"^engine: +{engine['id']}$", shown.stdout, re.MULTILINE), shown.stdout
    assert json.loads(serval("engine", "show", engine["id"], "--json", api=api, key=key).stdout) == engine

    source = texts[0]
    project = tmp_path / "WEB.zip"
    project.write_bytes(
        project_zip("WEB", "en", {"MAT": book_usfm("MAT", ebible_verses("engwebp", "MAT", [1]))})
    )
    text_file = json.loads(serval("files", "upload", str(source), "--json", api=api, key=key).stdout)
    uploaded = serval("files", "upload", str(project), api=api, key=key)
    assert text_file["format"] == "Text" and text_file["name"] == "mat.en.txt"
    zip_id = re.fullmatch(r"uploaded WEB\.zip as file (\w+) \(Paratext\)\n", uploaded.stdout)
    assert zip_id, uploaded.output
    rows = [line.split("\t") for line in serval("files", "list", api=api, key=key).stdout.splitlines()[1:]]
    assert sorted(rows) == sorted(
        [[text_file["id"], "mat.en.txt", "Text", "1"], [zip_id[1], "WEB.zip", "Paratext", "1"]]
    )

    assert serval("files", "delete", zip_id[1], api=api, key=key).stdout == f"deleted file {zip_id[1]}\n"
    assert [f["id"] for f in json.loads(serval("files", "list", "--json", api=api, key=key).stdout)] == [
        text_file["id"]
    ]
    assert serval("engine", "delete", engine["id"], api=api, key=key).exit_code == 0
    gone = serval("engine", "show", engine["id"], api=api, key=key)
    assert gone.exit_code == 1 and f"engine {engine['id']} answered 404" in gone.stderr


def test_without_a_key_the_sentence_names_the_flag(api: RunningApi) -> None:
    for args in (("engine", "list"), ("files", "list"), ("build", "list", "some-engine")):
        result = serval(*args, api=api)
        assert result.exit_code in (1, 3) and NO_KEY in result.stderr, result.output
        assert "header" not in result.output
    result = runner.invoke(
        app, ["translate", "some-engine", "Hello", "--address", api.grpc_target], env={"SERVAL_API_KEY": None}
    )
    assert result.exit_code == 1 and NO_KEY in result.stderr and "header" not in result.output, result.output
    bad = serval("engine", "list", api=api, key="serval_not-a-key")
    assert bad.exit_code == 1 and "the API service refused the API key" in bad.stderr


def test_a_service_that_is_down_is_one_sentence(tmp_path: Path, texts: tuple[Path, Path, list[str]]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    down = f"cannot reach the API service at {url}: is `serval api` running?"
    for args, code in (
        (("engine", "list"), 1),
        (("engine", "create", "-s", "en", "-t", "sw"), 1),
        (("files", "upload", str(texts[0])), 1),
        (("files", "list"), 1),
        (("train", str(texts[0]), str(texts[1]), "-s", "en", "-t", "sw"), 3),
        (("build", "list", "some-engine"), 3),
    ):
        result = runner.invoke(app, [*args, "--url", url, "--api-key", "k"])
        assert result.exit_code == code and result.stderr.strip() == f"error: {down}", (args, result.output)
        assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    address = f"127.0.0.1:{free_port()}"
    result = runner.invoke(app, ["translate", "e", "Hello", "--address", address, "--api-key", "k"])
    assert result.exit_code == 1
    assert (
        result.stderr.strip() == f"error: cannot reach the API service at {address}: is `serval api` running?"
    )


@pytest.fixture
def logging_restored() -> Iterator[None]:
    """`serval api` configures the process's logging (root handlers and levels); put it back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    named = {
        name: logging.getLogger(name).level for name in ("uvicorn.access", "httpx", "botocore", "urllib3")
    }
    try:
        yield
    finally:
        root.handlers[:], root.level = handlers, level
        for name, named_level in named.items():
            logging.getLogger(name).setLevel(named_level)


@pytest.mark.parametrize(
    ("flag", "env"), [("--rest-port", "SERVAL_API__REST_PORT"), ("--grpc-port", "SERVAL_API__GRPC_PORT")]
)
def test_api_on_a_port_in_use_says_which_and_how_to_change_it(
    tmp_path: Path, flag: str, env: str, logging_restored: None
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        ports = ["--rest-port", "0", "--grpc-port", "0", flag, port]
        result = runner.invoke(app, ["api", "--home", str(tmp_path), "--host", "127.0.0.1", *ports])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.exception
    assert result.stderr.strip().splitlines()[-1] == (
        f"cannot listen on 127.0.0.1:{port} ({'REST' if flag == '--rest-port' else 'gRPC'}): the port is "
        f"in use (is `serval api` already running?); choose another with {flag} or {env}"
    )
