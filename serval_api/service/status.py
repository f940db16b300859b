"""Health of the API service and the languages/queues an engine type offers."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import text

from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import EngineType
from serval_api.db.nodes import count_connected_nodes
from serval_api.errors import InvalidArgument
from serval_api.service.context import Services
from serval_api.service.engines import language, parse_engine_type
from serval_common.languages import LanguageInfo


@dataclass(frozen=True)
class Health:
    healthy: bool
    degraded: bool
    data: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def status(self) -> str:
        if not self.healthy:
            return "Unhealthy"
        return "Degraded" if self.degraded else "Healthy"


async def health(services: Services) -> Health:
    """Degraded while no inference node is connected: engines can be built but nmt cannot translate."""
    try:
        async with services.db.session() as s:
            await s.execute(text("SELECT 1"))
        nodes = await count_connected_nodes(services.db)
    except Exception as e:
        return Health(healthy=False, degraded=False, data={"database": "unreachable"}, error=str(e))
    data = {"database": "ok", "nodes": str(nodes), "queueSize": str(services.dispatcher.queue_size())}
    return Health(healthy=True, degraded=nodes == 0, data=data)


def language_info(caller: Caller, engine_type: str, tag: str) -> tuple[str, LanguageInfo]:
    caller.require(READ_ENGINES)
    kind = parse_engine_type(engine_type)
    if not tag:
        raise InvalidArgument("language: an empty tag")
    return kind.value, language("language", tag)


def queue_size(services: Services, caller: Caller, engine_type: str) -> tuple[str, int]:
    """Serval's engine-type queue: build jobs waiting to run (echo builds never wait)."""
    caller.require(READ_ENGINES)
    kind = parse_engine_type(engine_type)
    return kind.value, services.launcher.queue_depth() if kind is EngineType.NMT else 0
