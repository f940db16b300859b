"""An inference node outlives its API service: when the API service process restarts on the
same ports and database, the node redials within seconds and serves again."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest

from build_jobs.publish import publish_base_model
from serval_cli import processes
from serval_cli.bootstrap import create_credentials
from serval_common.languages import NLLB_LANGUAGE_CODES
from serval_common.settings import Settings
from serval_common.store import open_store
from tests.e2e.conftest import BASE_MODEL
from tests.e2e.test_translate_path import VERSE
from tests.helpers import free_port, wait_for_port


def start_api(
    home: Path, grpc_port: int, rest_port: int, database_url: str, log: str
) -> subprocess.Popen[bytes]:
    api = processes.start(
        ["api", "--home", str(home), "--grpc-port", str(grpc_port), "--rest-port", str(rest_port)],
        home / log,
        {"SERVAL_DATABASE_URL": database_url},
    )
    wait_for_port(rest_port, api)
    return api


@pytest.mark.sqlite_pass_only
def test_node_redials_a_restarted_api_service(
    tmp_path: Path, tiny_ct2_model: Path, database_url: str
) -> None:
    store = open_store((tmp_path / "store").as_uri())
    publish_base_model(
        store, BASE_MODEL, tiny_ct2_model, languages=list(NLLB_LANGUAGE_CODES), quantization="int8"
    )
    api_key, node_token = create_credentials(Settings(home=tmp_path, database_url=database_url), "redial")
    grpc_port, rest_port = free_port(), free_port()
    api = start_api(tmp_path, grpc_port, rest_port, database_url, "api-1.log")
    node = processes.start(
        [
            "node",
            "--home",
            str(tmp_path),
            "--api-address",
            f"127.0.0.1:{grpc_port}",
            "--node-id",
            "redial-node",
        ],
        tmp_path / "node.log",
        {"SERVAL_NODE__TOKEN": node_token},
    )
    health = processes.RestClient(f"http://127.0.0.1:{rest_port}", api_key)
    rest = httpx.Client(
        base_url=f"http://127.0.0.1:{rest_port}/api/v1", headers={"X-API-Key": api_key}, timeout=60
    )
    try:
        health.wait_for_node(node)
        engine = rest.post(
            "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
        ).json()
        build = rest.post(f"/translation/engines/{engine['id']}/builds", json={"trainOn": []}).json()
        deadline = time.monotonic() + 120
        while rest.get(f"/translation/engines/{engine['id']}").json()["modelRevision"] < 1:
            assert time.monotonic() < deadline, f"build {build['id']} never completed"
            time.sleep(0.2)
        url = f"/translation/engines/{engine['id']}/translate"
        before = rest.post(url, json=VERSE)
        assert before.status_code == 200, before.text

        assert processes.stop(api) == 0
        time.sleep(1.0)
        assert node.poll() is None, "the node must outlive the API service"
        api = start_api(tmp_path, grpc_port, rest_port, database_url, "api-2.log")
        restarted = time.monotonic()
        health.wait_for_node(node, timeout_s=20)
        redial_s = time.monotonic() - restarted
        after = rest.post(url, json=VERSE)
        assert after.status_code == 200, after.text
        assert after.json()["translation"] == before.json()["translation"]
        print(f"node redialed {redial_s:.2f} s after the API service restarted")
        assert redial_s < 10
    finally:
        rest.close()
        node_code = processes.stop(node)
        processes.stop(api)
        print((tmp_path / "node.log").read_text()[-2000:])
    assert node_code == 0
