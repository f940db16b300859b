"""The REST server's own loop (`serval_api.app._RestServer`): responses carry a current Date
header, a stop closes the port, and a request under way when the stop begins still gets its
answer (uvicorn's grace for open connections)."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

from tests.api.conftest import RunningApi, create_engine
from tests.helpers import wait_until


def refuses_connections(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_responses_carry_the_current_date(api: RunningApi) -> None:
    dates = []
    with api.client() as client:
        for _ in range(3):
            answer = client.get("/translation/engines")
            dates.append(parsedate_to_datetime(answer.headers["date"]))
            assert abs((datetime.now(UTC) - dates[-1]).total_seconds()) < 5, answer.headers["date"]
            time.sleep(1.2)  # past the server's next tick
    assert dates[-1] > dates[0], "the header is refreshed as the server ticks"


def test_an_idle_service_stops_and_frees_its_port(api: RunningApi) -> None:
    port = api.service.rest_port
    assert not refuses_connections(port)
    api.close()
    assert refuses_connections(port)


def test_a_long_poll_under_way_is_answered_before_the_service_stops(api: RunningApi) -> None:
    port = api.service.rest_port
    # Long enough that a loaded machine sees the poll waiting before it ends; short enough that
    # it ends within the stop's grace (GRACE_S + 1 s) on its own.
    api.wake_polls_only(4.0)
    with api.client() as client:
        engine = create_engine(client)
        build = client.post(f"/translation/engines/{engine['id']}/builds", json={}).json()
        url = f"/translation/engines/{engine['id']}/builds/{build['id']}"
        with ThreadPoolExecutor(1) as pool:
            polling = pool.submit(client.get, url, params={"min-revision": 2})
            wait_until(lambda: api.long_polls_waiting() == 1 or polling.done(), 60, "the poll waiting")
            assert not polling.done(), f"the poll was answered at once: {polling.result().text}"
            stopping = threading.Thread(target=api.close)
            stopping.start()
            answer: httpx.Response = polling.result(timeout=60)
            stopping.join(60)
    assert answer.status_code == 408, answer.text  # the poll ran to its limit; nothing changed
    assert not stopping.is_alive()
    assert refuses_connections(port)
