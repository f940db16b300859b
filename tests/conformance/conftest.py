from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from serval_common.settings import ApiSettings, Settings, WebhookSettings
from tests.api.conftest import RunningApi
from tests.conformance.report import REPORT_ENV, Report


@pytest.fixture
def api(tmp_path: Path, database_url: str) -> Iterator[RunningApi]:
    """An in-process API service (builds played by the test through the platform API) whose
    nodes heartbeat every half second, so an inference node process joins it quickly; its webhooks
    may target the loopback receiver."""
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(host="127.0.0.1", grpc_port=0, rest_port=0, heartbeat_interval_s=0.5),
        webhooks=WebhookSettings(allowed_networks=["127.0.0.0/8"]),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Report]:
    """Every call of the module's scenarios; written as Markdown when the module ends, whatever
    the outcome, to the pytest tmp dir and to $SERVAL_CONFORMANCE_REPORT when set."""
    collected = Report()
    try:
        yield collected
    finally:
        text = collected.markdown()
        (tmp_path_factory.getbasetemp() / "serval-conformance.md").write_text(text, encoding="utf-8")
        if target := os.environ.get(REPORT_ENV):
            Path(target).write_text(text, encoding="utf-8")
