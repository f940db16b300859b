from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import (
    REPO,
    TEST_DATABASE_URL,
    drop_database_templates,
    free_port,
    fresh_database,
    start_moto_server,
    verse_pairs,
)

DATABASE_FIXTURES = frozenset({"database_url", "empty_database_url", "e2e_database_url"})


SPLIT_PASSES = "SERVAL_TEST_SPLIT_PASSES"
"""Set by `make test`, which runs the SQLite pass and the PostgreSQL pass side by side."""

POSTGRES_PASS_MODULES = frozenset(
    {
        "tests/test_finetune.py",
        "tests/test_smt_model.py",
        "tests/test_smt_tuning.py",
        "tests/test_alignment_job.py",
        "tests/test_alignment_node.py",
        "tests/test_interactive_client.py",
        "tests/test_dockerfiles.py",
        "tests/e2e/test_web_pages.py",
        "tests/api/test_fuzz_openapi.py",
    }
)
"""Slow modules that run once: under `make test` the PostgreSQL pass runs them instead of the SQLite
pass, so the two passes, running side by side, end at about the same time. Most use no database;
the fuzzing of every REST operation then runs on PostgreSQL, which refuses some strings SQLite
stores (NUL characters), so its hostile input reaches the stricter of the two."""


TEST_CONTROLS = ("SERVAL_TEST_", "SERVAL_CONFORMANCE_REPORT", "SERVAL_SOAK_S")
"""Variables that steer the suite itself; every other `SERVAL_*` (and `CLEARML_*`) variable of the
shell that runs pytest is dropped, so a setting left in a developer's environment cannot change
what a test sees (tests that want one set it themselves)."""


def pytest_configure(config: pytest.Config) -> None:
    for name in list(os.environ):
        if (name.startswith("SERVAL_") and not name.startswith(TEST_CONTROLS)) or name.startswith("CLEARML_"):
            del os.environ[name]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The PostgreSQL pass of `make test` (SERVAL_TEST_DATABASE_URL set) runs only the tests that
    use a database (through a database fixture, or marked `database`) and are not marked
    `sqlite_pass_only`; the others ran on the SQLite pass and would run the same again. Under
    `make test`, the modules of `POSTGRES_PASS_MODULES` run on the PostgreSQL pass only."""
    split = bool(os.environ.get(SPLIT_PASSES))
    if not os.environ.get(TEST_DATABASE_URL):
        if split:
            _keep(config, items, [item for item in items if not _balanced(item)])
        return
    _keep(
        config,
        items,
        [
            item
            for item in items
            if (split and _balanced(item))
            or (
                not item.get_closest_marker("sqlite_pass_only")
                and (
                    item.get_closest_marker("database")
                    or DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
                )
            )
        ],
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    drop_database_templates()


def _balanced(item: pytest.Item) -> bool:
    return item.path.resolve().relative_to(REPO).as_posix() in POSTGRES_PASS_MODULES


def _keep(config: pytest.Config, items: list[pytest.Item], keep: list[pytest.Item]) -> None:
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session")
def tiny_ct2_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny NLLB-architecture CTranslate2 model (eng_Latn ↔ swh_Latn), briefly trained.

    120 steps is the fewest at which it emits words rather than only punctuation, so tests that
    compare its output with CTranslate2's compare real strings.
    """
    from build_jobs.base_model import make_tiny_base_model

    sources, targets = verse_pairs("engwebp", "swh1850", 300)
    return make_tiny_base_model(
        tmp_path_factory.mktemp("tiny"), sources, targets, "eng_Latn", "swh_Latn", steps=120
    )


@pytest.fixture(scope="session")
def thot_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small `smt-transfer` model folder: Thot trained on 300 English→Swahili verse pairs (the
    first 300 of `verse_pairs`; the verses after them are unseen)."""
    from build_jobs.data import split_corpus
    from build_jobs.smt.train import train_smt
    from serval_common.smt_build_options import SmtBuildOptions

    sources, targets = verse_pairs("engwebp", "swh1850", THOT_MODEL_PAIRS)
    corpus = split_corpus(sources, targets, eval_share=0.05, seed=0)
    model = tmp_path_factory.mktemp("thot") / "model"
    train_smt(corpus, SmtBuildOptions(), model, phase=lambda _f, _m: None, should_cancel=lambda: False)
    return model


THOT_MODEL_PAIRS = 300


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """A database for this test alone, with the newest schema and no rows, on SQLite or on
    SERVAL_TEST_DATABASE_URL's server."""
    with fresh_database(tmp_path) as url:
        yield url


@pytest.fixture
def empty_database_url(tmp_path: Path) -> Iterator[str]:
    """Like `database_url`, but empty: no schema yet (for tests of the migrations)."""
    with fresh_database(tmp_path, migrated=False) as url:
        yield url


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real S3-protocol server (moto) on a loopback port."""
    port = free_port()
    server = start_moto_server(port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def s3_bucket(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    import boto3

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    name = "models-" + request.node.name.lower().replace("_", "-").replace("[", "-").replace("]", "")[:40]
    boto3.client("s3", endpoint_url=moto_endpoint).create_bucket(Bucket=name)
    return name
