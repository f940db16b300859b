"""Health of the API service and the languages/queues an engine type offers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from sqlalchemy import text

from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import TRANSLATION_TYPES, EngineType
from serval_api.db.nodes import count_connected_nodes
from serval_api.errors import InvalidArgument, NotFound, NotSupported
from serval_api.service import limits
from serval_api.service.context import Services
from serval_api.service.engines import parse_engine_type
from serval_common.languages import LanguageInfo, nllb_language_info
from serval_common.redact import redact, secret_values

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 5.0
"""A dependency that has not answered by then is Unhealthy: a health probe must answer promptly."""
STORE_PROBE_KEY = "health/probe"
"""A key nobody writes: asking whether it exists is the cheapest read every store offers."""
MAX_EXCEPTION_CHARS = 300


class HealthStatus(IntEnum):
    """Ordered from worst to best, so the overall status is the `min` of the entries'."""

    UNHEALTHY = 0
    DEGRADED = 1
    HEALTHY = 2

    @property
    def label(self) -> str:
        return self.name.capitalize()


@dataclass(frozen=True)
class HealthEntry:
    status: HealthStatus
    duration_s: float
    description: str | None = None
    exception: str | None = None
    data: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HealthReport:
    status: HealthStatus
    duration_s: float
    entries: dict[str, HealthEntry] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        """Serving: Healthy or Degraded."""
        return self.status is not HealthStatus.UNHEALTHY


@dataclass(frozen=True)
class _Outcome:
    status: HealthStatus
    description: str | None = None
    data: dict[str, str] = field(default_factory=dict)


async def health(services: Services) -> HealthReport:
    """Every dependency checked on its own, concurrently, and timed."""
    checks: dict[str, Callable[[], Awaitable[_Outcome]]] = {
        "database": lambda: _database(services),
        "modelStore": lambda: _model_store(services),
        "nodes": lambda: _nodes(services),
        "jobLauncher": lambda: _job_launcher(services),
    }
    started = time.perf_counter()
    known = secret_values(services.settings)
    entries = await asyncio.gather(*(_timed(name, check, known) for name, check in checks.items()))
    results = dict(zip(checks, entries, strict=True))
    return HealthReport(
        status=min(e.status for e in entries), duration_s=time.perf_counter() - started, entries=results
    )


def ping() -> HealthReport:
    """Liveness: the process answers; no dependency is asked."""
    return HealthReport(status=HealthStatus.HEALTHY, duration_s=0.0)


async def _timed(name: str, check: Callable[[], Awaitable[_Outcome]], known: Iterable[str]) -> HealthEntry:
    started = time.perf_counter()
    try:
        outcome = await asyncio.wait_for(check(), CHECK_TIMEOUT_S)
    except TimeoutError:
        return HealthEntry(
            HealthStatus.UNHEALTHY,
            time.perf_counter() - started,
            description=f"no answer within {CHECK_TIMEOUT_S:g} s",
            exception="TimeoutError",
        )
    except Exception as e:
        log.warning("health check failed", extra={"check": name, "error": f"{type(e).__name__}: {e}"})
        return HealthEntry(
            HealthStatus.UNHEALTHY,
            time.perf_counter() - started,
            description="unreachable",
            exception=describe_exception(e, known),
        )
    return HealthEntry(outcome.status, time.perf_counter() - started, outcome.description, data=outcome.data)


async def _database(services: Services) -> _Outcome:
    async with services.db.session() as s:
        await s.execute(text("SELECT 1"))
    return _Outcome(HealthStatus.HEALTHY)


async def _model_store(services: Services) -> _Outcome:
    """One store call for however many probes ask (`Services.store_health`), on the store's own
    threads: a store that never answers holds one of those, never the default executor."""

    async def probe() -> None:
        await services.store_call(services.store.exists, STORE_PROBE_KEY)

    await services.store_health(probe)
    return _Outcome(HealthStatus.HEALTHY)


async def _nodes(services: Services) -> _Outcome:
    connected = await count_connected_nodes(services.db)
    data = {"connected": str(connected), "queuedRequests": str(services.dispatcher.queue_size())}
    if connected == 0:
        return _Outcome(
            HealthStatus.DEGRADED, "no inference node is connected: nmt engines cannot translate", data
        )
    return _Outcome(HealthStatus.HEALTHY, data=data)


async def _job_launcher(services: Services) -> _Outcome:
    return _Outcome(HealthStatus.HEALTHY, data={"queueDepth": str(services.launcher.queue_depth())})


def describe_exception(error: BaseException, known: Iterable[str] = ()) -> str:
    """The exception's class and message with URLs, paths and credentials masked (`known`: the
    settings' secret values), cut short: enough to tell what failed without handing a probe
    anything it could log and reuse."""
    message = " ".join(redact(str(error), known).split())
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= MAX_EXCEPTION_CHARS else text[: MAX_EXCEPTION_CHARS - 1] + "…"


def language_info(caller: Caller, engine_type: str, tag: str) -> tuple[str, LanguageInfo]:
    """What Serval's engines answer (`GetLanguageInfo.cs`, each engine service's
    `GetLanguageInfoAsync`): `nmt` the NLLB-200 code the tag resolves to and whether NLLB-200 knows
    it (a tag it does not know is not native, not refused: `nllb_language_info`), `smt-transfer` the
    tag as sent and `echo` the tag plus `_echo`, both native. What is not a translation engine type
    is 404, as in Serval. What no language tag can be is 400 for every type (Serval's smt-transfer
    and echo engines take any text)."""
    caller.require(READ_ENGINES)
    try:
        kind = parse_engine_type(engine_type)
    except (InvalidArgument, NotSupported) as e:
        raise NotFound(str(e)) from None
    limits.text("language", tag, limits.LANGUAGE_TAG_CHARS)
    try:
        info = nllb_language_info(tag)
    except ValueError as e:
        raise InvalidArgument(f"language: {e}") from None
    if kind is EngineType.NMT:
        return kind.value, info
    return kind.value, LanguageInfo(tag=tag, code=f"{tag}_echo" if kind.is_echo else tag, is_native=True)


def queue_size(
    services: Services, caller: Caller, engine_type: str, types: frozenset[EngineType] = TRANSLATION_TYPES
) -> tuple[str, int]:
    """Serval's engine-type queue: build jobs waiting to run (echo builds never wait; every other
    type's builds wait in the one job queue). `types`: the engine types of the asking API's kind."""
    caller.require(READ_ENGINES)
    kind = parse_engine_type(engine_type, types)
    return kind.value, 0 if kind.is_echo else services.launcher.queue_depth()
