"""The store sweep: model revisions and build files that nothing in the database owns any more.

Deleting an engine removes its store objects after its rows, and a build that does not complete
has its revision folder removed when it ends and again when its job exits. A process that dies
between the two, or a store that is down at the time, leaves objects behind; nothing serves them
and no revision number is given twice, but they take space. The sweep lists `models/` and
`builds/` and removes every revision folder no Completed, Pending or Active build owns (the
running ones may be being written) and every build folder whose build is gone. Base models and
data files are never touched. The store is listed before the database is read, so an object
listed belongs to a row already committed, and a concurrent build is never swept.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import select

from serval_api.db.models import Build, BuildState
from serval_api.service import revisions
from serval_api.service.context import Services
from serval_api.service.files import model_store
from serval_common.store import ModelStore

log = logging.getLogger(__name__)

_OWNING = (BuildState.COMPLETED.value, BuildState.PENDING.value, BuildState.ACTIVE.value)


async def sweep_store(services: Services) -> int:
    """Remove what belongs to no build; returns how many such folders it found."""
    store = model_store(services.settings)
    model_keys = await asyncio.to_thread(store.list_keys, "models")
    build_keys = await asyncio.to_thread(store.list_keys, "builds")
    async with services.db.session() as s:
        rows = (
            await s.execute(select(Build.id, Build.engine_id, Build.state, Build.target_model_revision))
        ).all()
    owned = {(engine_id, str(revision)) for _, engine_id, state, revision in rows if state in _OWNING}
    given = {(engine_id, str(revision)): build_id for build_id, engine_id, _, revision in rows}
    builds = {build_id for build_id, *_ in rows}

    removed = 0
    for engine_id, revision in sorted(
        {tuple(key.split("/")[1:3]) for key in model_keys if key.count("/") >= 3}
    ):
        if (engine_id, revision) in owned:
            continue
        build_id = given.get((engine_id, revision))
        if build_id is not None and revision.isdigit():
            await revisions.discard(services, engine_id, int(revision), build_id)
        else:
            await _remove(
                store, f"models/{engine_id}/{revision}", {"engine_id": engine_id, "revision": revision}
            )
        removed += 1
    for build_id in sorted({key.split("/")[1] for key in build_keys if key.count("/") >= 2}):
        if build_id not in builds:
            await _remove(store, f"builds/{build_id}", {"build_id": build_id})
            removed += 1
    if removed:
        log.info("store sweep removed folders nothing owns", extra={"folders": removed})
    return removed


async def _remove(store: ModelStore, prefix: str, extra: dict[str, str]) -> None:
    try:
        await asyncio.to_thread(store.delete_prefix, prefix)
    except Exception:
        log.exception("store sweep could not remove a folder", extra={**extra, "prefix": prefix})
        return
    log.info("store sweep removed a folder nothing owns", extra={**extra, "prefix": prefix})


async def sweep_forever(services: Services, interval_s: float) -> None:
    """Sweep every `interval_s`, the first time one interval after the start (a fresh replica has
    nothing urgent to sweep); a failed sweep is logged and tried again next time."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await sweep_store(services)
        except Exception:
            log.exception("store sweep failed")
