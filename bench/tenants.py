"""The issue's hostile tenant, on 127.0.0.1 only, against an API service process and a node
process (SQLite; `bench/system.py`'s `running_system`, the tiny base model).

1. **Webhooks.** Owner B registers 3 hooks on a receiver that accepts connections and never
   answers, and starts 40 echo builds; then owner A, whose hook is on a live receiver, starts one.
   Measured: start → A's `TranslationBuildFinished` at A's receiver, beside the same with no B.
2. **Translation.** A and B each have an inference-only engine on the tiny base model (one node,
   one copy of the weights). 32 closed-loop clients translate on B's key while A sends single
   requests one after another: A's p50/p95, B's answers and refusals, with the limits at their
   defaults and with B's key given a low `translate_per_minute` override; beside A alone.

    .venv/bin/python -m bench.tenants [--seconds 15] [--clients 32] [--low-limit 120] [--refusal-delay S]
                                      [--home .serval] [--out bench/results/tenants.json]

The tiny base model is read from `{home}/store` (built there on first use, as `serval demo` does)
and copied into the run's own store. About two minutes on 2 CPU cores (the limited
phases wait for a fresh minute); bounded: 40 builds, `--seconds` per translation phase.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import multiprocessing
import resource
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
from rich.console import Console
from rich.table import Table

from bench.system import System, running_system
from serval_api.auth import ALL_SCOPES, KeyLimits
from serval_api.db.models import ApiKeyRow
from serval_api.service.keys import create_api_key, set_api_key_limits
from serval_cli.admin import with_db
from serval_common.settings import NodeSettings, Settings
from tests.api.webhook_receiver import Receiver, Silent

console = Console(stderr=True)
BASE_MODEL = "tiny-nllb"
HOSTILE_BUILDS = 40
SILENT_HOOKS = 3
EVENTS = ["TranslationBuildStarted", "TranslationBuildFinished"]
SECRET = "bench-secret"
HOOK_WAIT_S = 90.0
ALONE_S = 5.0
A_SENTENCE = "In the beginning was the Word, and the Word was with God."
B_SENTENCE = "For God so loved the world, that he gave his only Son."


OWNERS = ("tenant-a", "tenant-b")


async def new_key(db: Any, owner: str) -> tuple[ApiKeyRow, str]:
    return await create_api_key(db, owner, ALL_SCOPES)


class Service:
    """The running system with a key for each tenant."""

    def __init__(self, system: System, home: Path) -> None:
        self.system = system
        self.home = home
        self.url = Settings(home=home).resolved_database_url
        self.keys = {
            owner: with_db(home, self.url, functools.partial(new_key, owner=owner)) for owner in OWNERS
        }
        self.rest_url = system.rest_url

    def client(self, owner: str, timeout_s: float = 60) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.rest_url}/api/v1",
            headers={"X-API-Key": self.keys[owner][1]},
            timeout=timeout_s,
        )

    def set_limits(self, owner: str, overrides: KeyLimits) -> None:
        with_db(self.home, self.url, lambda db: set_api_key_limits(db, self.keys[owner][0].id, overrides))
        time.sleep(2.0)  # a replica reuses a checked key for api.lookup_cache_s (1 s)


@contextlib.contextmanager
def running(
    folder: Path, base_home: Path, refusal_delay_s: float | None = None, nodes: int = 1
) -> Iterator[Service]:
    """A store of the run's own holding the tiny base model, and the system on it (`nodes` nodes)."""
    settings = Settings(home=base_home)
    source = urlparse(settings.resolved_store_url)
    if source.scheme != "file":
        raise SystemExit("bench.tenants copies the tiny base model from a local store (--home)")
    if not (Path(source.path) / "base-models" / BASE_MODEL / "manifest.json").exists():
        from serval_cli.demo import ensure_base_model

        ensure_base_model(settings, steps=1000, rebuild=False)
    store = folder / "store"
    shutil.copytree(Path(source.path) / "base-models" / BASE_MODEL, store / "base-models" / BASE_MODEL)
    home = folder / "home"
    extra_env = {"SERVAL_WEBHOOKS__ALLOWED_NETWORKS": '["127.0.0.0/8"]'}
    if refusal_delay_s is not None:
        extra_env["SERVAL_LIMITS__REFUSAL_DELAY_S"] = str(refusal_delay_s)
    with running_system(home, store.resolve().as_uri(), NodeSettings(), extra_env, nodes) as system:
        yield Service(system, home)


def echo_engine(client: httpx.Client) -> str:
    answer = client.post(
        "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "echo"}
    )
    answer.raise_for_status()
    engine_id: str = answer.json()["id"]
    return engine_id


def start_build(client: httpx.Client, engine_id: str) -> str:
    answer = client.post(f"/translation/engines/{engine_id}/builds", json={})
    answer.raise_for_status()
    build_id: str = answer.json()["id"]
    return build_id


def register(client: httpx.Client, url: str) -> None:
    client.post("/hooks", json={"payloadUrl": url, "secret": SECRET, "events": EVENTS}).raise_for_status()


def a_build_finished(service: Service, receiver: Receiver) -> float:
    """Seconds from A's build start to its TranslationBuildFinished at A's receiver."""
    with service.client("tenant-a") as a:
        engine_id = echo_engine(a)
        started = time.monotonic()
        build_id = start_build(a, engine_id)
    deadline = started + HOOK_WAIT_S
    while time.monotonic() < deadline:
        for received in list(receiver.received):
            body = received.json
            if (
                body.get("event") == "TranslationBuildFinished"
                and body.get("payload", {}).get("build", {}).get("id") == build_id
            ):
                return time.monotonic() - started
        time.sleep(0.02)
    return float("nan")


def webhooks(service: Service) -> dict[str, Any]:
    receiver = Receiver(SECRET).start()
    silent = Silent().start()
    try:
        with service.client("tenant-a") as a:
            register(a, receiver.url)
        alone = a_build_finished(service, receiver)
        with service.client("tenant-b") as b:
            for _ in range(SILENT_HOOKS):
                register(b, silent.url)
            began = time.monotonic()
            for _ in range(HOSTILE_BUILDS):
                start_build(b, echo_engine(b))
            starting_s = time.monotonic() - began
        hostile = a_build_finished(service, receiver)
        return {
            "a_alone_s": alone,
            "a_beside_hostile_s": hostile,
            "hostile_builds": HOSTILE_BUILDS,
            "hostile_hooks": SILENT_HOOKS,
            "hostile_starts_s": starting_s,
            "silent_connections_accepted": silent.accepted,
        }
    finally:
        receiver.stop()
        silent.stop()


def served_engine(service: Service, owner: str) -> str:
    """An inference-only engine of `owner` on the tiny base model, built and answering."""
    with service.client(owner) as client:
        answer = client.post(
            "/translation/engines", json={"sourceLanguage": "en", "targetLanguage": "sw", "type": "nmt"}
        )
        answer.raise_for_status()
        engine_id: str = answer.json()["id"]
        build = client.post(
            f"/translation/engines/{engine_id}/builds",
            json={"trainOn": [], "options": {"baseModel": BASE_MODEL}},
        )
        build.raise_for_status()
        build_id = build.json()["id"]
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            state = client.get(f"/translation/engines/{engine_id}/builds/{build_id}").json()["state"]
            if state == "Completed":
                break
            if state in ("Faulted", "Canceled"):
                raise RuntimeError(f"{owner}'s build ended {state}")
            time.sleep(0.2)
        while time.monotonic() < deadline:  # until the node has loaded it
            if client.post(f"/translation/engines/{engine_id}/translate", json="Hello.").status_code == 200:
                return engine_id
            time.sleep(0.5)
    raise RuntimeError(f"{owner}'s engine did not answer")


def a_requests(service: Service, engine_id: str, seconds: float) -> list[float]:
    """A's single requests, one after another, for `seconds`: their latencies."""
    latencies: list[float] = []
    with service.client("tenant-a") as a:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            began = time.perf_counter()
            answer = a.post(f"/translation/engines/{engine_id}/translate", json=A_SENTENCE)
            latencies.append(time.perf_counter() - began)
            assert answer.status_code == 200, answer.text
    return latencies


def hostile_load(
    rest_url: str, key: str, engine_id: str, clients: int, seconds: float, polite: bool, out: Any
) -> None:
    """B's clients, in a process of their own (so that they never hold the measuring process's
    GIL): `clients` closed-loop threads for `seconds`; puts the answers' counts and the CPU seconds
    the process used on `out`. `polite`: a 429's Retry-After is waited out (a well-behaved client)
    instead of sending again at once."""
    counts = {"ok": 0, "refused": 0, "other": 0}
    lock = threading.Lock()
    stop = threading.Event()

    def client() -> None:
        with httpx.Client(base_url=f"{rest_url}/api/v1", headers={"X-API-Key": key}, timeout=60) as b:
            while not stop.is_set():
                answer = b.post(f"/translation/engines/{engine_id}/translate", json=B_SENTENCE)
                status = answer.status_code
                with lock:
                    counts["ok" if status == 200 else "refused" if status == 429 else "other"] += 1
                if polite and status == 429:
                    stop.wait(float(answer.headers.get("Retry-After", "1")))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join(30)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put({**counts, "cpu_s": usage.ru_utime + usage.ru_stime})


def contention(
    service: Service, a_engine: str, b_engine: str, clients: int, seconds: float, *, polite: bool = False
) -> dict[str, Any]:
    """B's load (`hostile_load`) while A measures, one second after B began."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    key = service.keys["tenant-b"][1]
    load = context.Process(
        target=hostile_load, args=(service.rest_url, key, b_engine, clients, seconds + 2.0, polite, out)
    )
    cpu_before = service.system.cpu_seconds()
    load.start()
    time.sleep(2.0)  # B's process has started and all its clients are sending
    latencies = a_requests(service, a_engine, seconds)
    counts = out.get(timeout=120)
    load.join(30)
    cpu = cpu_used(service, cpu_before, seconds + 2.0)
    return {
        **summary(latencies),
        **cpu,
        "b_clients_cores": counts["cpu_s"] / (seconds + 2.0),
        "b_ok": counts["ok"],
        "b_refused": counts["refused"],
        "b_other": counts["other"],
        "b_ok_per_s": counts["ok"] / (seconds + 2.0),
    }


def cpu_used(service: Service, before: dict[str, float], seconds: float) -> dict[str, float]:
    """Cores each process kept busy over the phase (CPU seconds per second)."""
    after = service.system.cpu_seconds()
    return {f"{name}_cores": (after[name] - before[name]) / seconds for name in after}


QUOTA_CALLS = 20_000


def quota_cost(folder: Path, database_url: str | None) -> dict[str, Any]:
    """What the translate limit adds to a request, in process: `Quotas.translate` at the default
    limit (a replica reserves 100 at a time, one UPSERT … RETURNING each), and one reservation
    alone (the UPSERT), on SQLite in `folder` or on `database_url`."""
    from serval_api.auth import Caller
    from serval_api.db.database import Database
    from serval_api.service.quotas import Limit, Quotas
    from serval_common.settings import LimitSettings

    async def measure() -> dict[str, Any]:
        db = Database(database_url or f"sqlite:///{folder / 'quota.db'}")
        await db.migrate()
        try:
            quotas = Quotas(db, LimitSettings(), replica="bench")
            caller = Caller(owner="bench", scopes=frozenset(), key_id=f"bench-{time.time_ns()}")
            began = time.perf_counter()
            for _ in range(QUOTA_CALLS):
                await quotas.translate(caller)
            per_call = (time.perf_counter() - began) / QUOTA_CALLS
            reservations = []
            for i in range(200):
                began = time.perf_counter()
                await quotas._reserve(f"bench-upsert-{i % 10}", Limit.TRANSLATE, int(time.time()), 1)
                reservations.append(time.perf_counter() - began)
        finally:
            await db.close()
        return {
            "database": "postgresql" if database_url else "sqlite",
            "translate_check_us": per_call * 1e6,
            "upsert_p50_ms": statistics.median(reservations) * 1000,
            "calls": QUOTA_CALLS,
        }

    return asyncio.run(measure())


def summary(latencies: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies)
    return {
        "a_requests": len(ordered),
        "a_p50_ms": statistics.median(ordered) * 1000,
        "a_p95_ms": ordered[int(0.95 * (len(ordered) - 1))] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each translation phase")
    parser.add_argument("--clients", type=int, default=32, help="B's concurrent translate clients")
    parser.add_argument("--low-limit", type=int, default=120, help="B's translate_per_minute override")
    parser.add_argument(
        "--refusal-delay",
        type=float,
        default=None,
        help="the service's limits.refusal_delay_s (default: its own)",
    )
    parser.add_argument("--home", type=Path, default=Path(".serval"), help="where the base model is kept")
    parser.add_argument("--out", type=Path, default=Path("bench/results/tenants.json"))
    parser.add_argument(
        "--quota-database-url",
        default=None,
        help="measure the limit's cost on this database (default: SQLite)",
    )
    args = parser.parse_args()
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="serval-tenants-") as scratch:
        console.print("the translate limit's cost per request")
        cost = quota_cost(Path(scratch), args.quota_database_url)
    with (
        tempfile.TemporaryDirectory(prefix="serval-tenants-") as folder,
        running(Path(folder), args.home, args.refusal_delay) as service,
    ):
        console.print("webhooks: B's silent hooks and 40 builds beside A's build")
        hooks = webhooks(service)
        a_engine, b_engine = served_engine(service, "tenant-a"), served_engine(service, "tenant-b")
        console.print("translation: A alone")
        cpu_before = service.system.cpu_seconds()
        alone = {
            **summary(a_requests(service, a_engine, ALONE_S)),
            **cpu_used(service, cpu_before, ALONE_S),
        }
        console.print(f"translation: {args.clients} clients on B's key, default limits")
        default = contention(service, a_engine, b_engine, args.clients, args.seconds)
        service.set_limits("tenant-b", KeyLimits(translate_per_minute=args.low_limit))
        # Limits count fixed minutes: start B's limited phase with a fresh one, not the minute the
        # default phase already filled past the low limit.
        time.sleep(60 - time.time() % 60 + 0.2)
        console.print(f"translation: {args.clients} clients on B's key, B limited to {args.low_limit}/min")
        limited = contention(service, a_engine, b_engine, args.clients, args.seconds)
        console.print("translation: the same, B's clients wait out Retry-After")
        polite = contention(service, a_engine, b_engine, args.clients, args.seconds, polite=True)
    figures = {
        "webhooks": hooks,
        "quota_cost": cost,
        "translate": {
            "a_alone": alone,
            "default_limits": default,
            "b_limited": limited,
            "b_limited_polite": polite,
        },
        "clients": args.clients,
        "seconds": args.seconds,
        "low_limit": args.low_limit,
        "refusal_delay_s": args.refusal_delay,
        "wall_s": time.monotonic() - began,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2))

    table = Table("scenario", "A's figure", "B", "cores busy", box=None, header_style="bold")
    table.add_row("A's build → its BuildFinished hook, no B", f"{hooks['a_alone_s']:.2f} s", "")
    table.add_row(
        "A's build → its BuildFinished hook, B hostile",
        f"{hooks['a_beside_hostile_s']:.2f} s",
        f"{SILENT_HOOKS} silent hooks, {HOSTILE_BUILDS} builds",
    )
    for name, row in (
        ("A alone", alone),
        ("B 32 clients, default limits", default),
        (f"B limited {args.low_limit}/min", limited),
        (f"B limited {args.low_limit}/min, waits out Retry-After", polite),
    ):
        b = (
            f"{row['b_ok']} ok ({row['b_ok_per_s']:.0f}/s), {row['b_refused']} refused (429)"
            if "b_ok" in row
            else ""
        )
        cores = f"API {row['api_cores']:.2f}, node {row['node_cores']:.2f}, A {row['clients_cores']:.2f}"
        if "b_clients_cores" in row:
            cores += f", B's clients {row['b_clients_cores']:.2f}"
        table.add_row(
            f"translate: {name}", f"p50 {row['a_p50_ms']:.1f} ms, p95 {row['a_p95_ms']:.1f} ms", b, cores
        )
    table.add_row(
        f"the translate limit's check ({cost['database']})",
        f"{cost['translate_check_us']:.1f} µs a request, UPSERT p50 {cost['upsert_p50_ms']:.2f} ms",
        "",
        "",
    )
    Console(width=180).print(table)
    console.print(f"wrote {args.out} ({figures['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
