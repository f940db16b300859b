"""The store sweep: model revisions and build files that nothing in the database owns any more.

Deleting an engine removes its store objects after its rows, and a build that does not complete
has its revision folder removed when it ends and again when its job exits. A process that dies
between the two, or a store that is down at the time, leaves objects behind; nothing serves them
and no revision number is given twice, but they take space. The sweep lists `models/` and
`builds/` and removes every revision folder no Completed, Pending or Active build owns (the
running ones may be being written) and every build folder whose build is gone. It lists `files/`
too, where data files uploaded before their contents moved to the database keep them
(`file_contents`), and removes those of a file that is gone or whose contents are now in the
database (deleting or replacing such a file removes them at once unless the store is down).
Base models are never touched. The store is listed before the database is read, so an object
listed belongs to a row already committed, and a concurrent build is never swept; nothing writes
under `files/` any more.

**Superseded revisions.** Each completed build adds a revision (an NMT fine-tune its weights and
its `hf/` training checkpoint), and the engine serves only its newest. The sweep keeps, of each
engine's completed revisions, the current one, the `api.keep_previous_revisions` (1) before it
(what routing falls back on while a new revision loads everywhere) and any a node connected to
this replica holds (loaded, loading or failed); the others are removed once
`api.revision_grace_s` has passed since the build that superseded them completed (a node may
still be swapping, a download URL issued for it may still be in use). The `hf/` checkpoints of
all but the current revision go after the same grace: a node never reads them, and a build starts
from a base model's checkpoint only (`baseModel` names a base model; no build reads a revision),
so nothing needs them once no download URL can name the revision. A revision goes manifest first,
so no reader sees a manifest whose files are going.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.db.models import BuildRow, BuildState, DataFileChunkRow, DataFileRow, EngineRow
from serval_api.service import revisions
from serval_api.service.context import Services
from serval_common.manifest import ForeignRevision, remove_revision
from serval_common.model_revision import MODELS, TRAINING_CHECKPOINT, ModelRevision

Removed = Callable[[str], None]
"""Told what the sweep removed: `revision` (a superseded revision) or `checkpoint` (its `hf/`)."""

log = logging.getLogger(__name__)

_OWNING = (BuildState.COMPLETED.value, BuildState.PENDING.value, BuildState.ACTIVE.value)


async def sweep_store(services: Services, *, removed_listener: Removed | None = None) -> int:
    """Remove what belongs to no build or data file, and superseded revisions past their grace;
    returns how many such folders it found."""
    store = services.store
    model_keys = await services.store_call(store.list_keys, MODELS)
    build_keys = await services.store_call(store.list_keys, "builds")
    file_ids = {key.split("/")[1] for key in await services.store_call(store.list_keys, "files")}
    held = _held_by_nodes(services)
    async with services.db.session() as s:
        rows = (
            await s.execute(
                select(
                    BuildRow.id,
                    BuildRow.engine_id,
                    BuildRow.state,
                    BuildRow.target_model_revision,
                    BuildRow.date_finished,
                )
            )
        ).all()
        current = dict((await s.execute(select(EngineRow.id, EngineRow.model_revision))).all())
        files_in_store = await _files_in_store(s, file_ids)
    owned = {(engine_id, str(revision)) for _, engine_id, state, revision, _ in rows if state in _OWNING}
    given = {(engine_id, str(revision)): build_id for build_id, engine_id, _, revision, _ in rows}
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
                services, f"{MODELS}/{engine_id}/{revision}", {"engine_id": engine_id, "revision": revision}
            )
        removed += 1
    for build_id in sorted({key.split("/")[1] for key in build_keys if key.count("/") >= 2}):
        if build_id not in builds:
            await _remove(services, f"builds/{build_id}", {"build_id": build_id})
            removed += 1
    for file_id in sorted(file_ids - files_in_store):
        await _remove(services, f"files/{file_id}", {"file_id": file_id})
        removed += 1
    completed = [
        _Completed(engine_id, revision, build_id, _utc(finished))
        for build_id, engine_id, state, revision, finished in rows
        if state == BuildState.COMPLETED.value
    ]
    removed += await _retire_superseded(services, model_keys, completed, current, held, removed_listener)
    if removed:
        log.info("store sweep removed folders nothing owns", extra={"folders": removed})
    return removed


@dataclass(frozen=True)
class _Completed:
    engine_id: str
    revision: int
    build_id: str
    finished: datetime | None


async def _retire_superseded(
    services: Services,
    model_keys: list[str],
    completed: list[_Completed],
    current: dict[str, int],
    held: set[str],
    removed_listener: Removed | None,
) -> int:
    """Remove superseded revisions (and `hf/` checkpoints) past their grace; see the module docstring."""
    api = services.settings.api
    cutoff = datetime.now(UTC) - timedelta(seconds=api.revision_grace_s)
    present: dict[str, bool] = {}
    """Revision location → whether it has an `hf/` checkpoint, for revisions with any object."""
    for key in model_keys:
        parts = key.split("/")
        if len(parts) >= 4:
            location = "/".join(parts[:3])
            present[location] = present.get(location, False) or parts[3] == TRAINING_CHECKPOINT
    by_engine: dict[str, list[_Completed]] = {}
    for build in completed:
        by_engine.setdefault(build.engine_id, []).append(build)
    removed = 0
    for engine_id, builds in sorted(by_engine.items()):
        serving = current.get(engine_id)
        if serving is None:
            continue
        builds.sort(key=lambda b: b.revision)
        older = [b for b in builds if b.revision < serving]
        previous = {b.revision for b in older[::-1][: api.keep_previous_revisions]}
        for build in older:
            location = ModelRevision(engine_id, build.revision).location
            if location not in present:
                continue
            superseded = min(
                (b.finished for b in builds if b.revision > build.revision and b.finished is not None),
                default=None,
            )
            if superseded is None or superseded > cutoff:
                continue
            extra = {"engine_id": engine_id, "revision": build.revision, "build_id": build.build_id}
            if build.revision in previous or location in held:
                if present[location]:
                    prefix = f"{location}/{TRAINING_CHECKPOINT}"
                    if await _remove(services, prefix, {**extra, "why": "superseded checkpoint"}):
                        removed += 1
                        if removed_listener is not None:
                            removed_listener("checkpoint")
                continue
            if await _remove_revision(services, build, extra):
                removed += 1
                if removed_listener is not None:
                    removed_listener("revision")
    return removed


async def _remove_revision(services: Services, build: _Completed, extra: dict[str, object]) -> bool:
    try:
        objects = await services.store_call(
            remove_revision, services.store, build.engine_id, build.revision, build_id=build.build_id
        )
    except ForeignRevision as e:
        log.warning("superseded revision folder left alone", extra={**extra, "reason": str(e)})
        return False
    except Exception:
        log.exception("store sweep could not remove a superseded revision", extra=extra)
        return False
    log.info("store sweep removed a superseded revision", extra={**extra, "objects": objects})
    return True


def _held_by_nodes(services: Services) -> set[str]:
    """The revision locations nodes connected to this replica hold, in any state."""
    if services.fleet is None:
        return set()
    return {key.location for session in services.fleet.registry.sessions() for key in session.held()}


def _utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive date-times; they are UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


async def _files_in_store(s: AsyncSession, file_ids: set[str]) -> set[str]:
    """Those of `file_ids` whose file exists and has no chunk: its contents are the store's."""
    found: set[str] = set()
    ids = sorted(file_ids)
    for start in range(0, len(ids), 500):
        batch = ids[start : start + 500]
        existing = set((await s.scalars(select(DataFileRow.id).where(DataFileRow.id.in_(batch)))).all())
        chunked = select(DataFileChunkRow.file_id).where(
            DataFileChunkRow.file_id.in_(batch), DataFileChunkRow.seq == 0
        )
        found |= existing - set((await s.scalars(chunked)).all())
    return found


async def _remove(services: Services, prefix: str, extra: dict[str, object]) -> bool:
    try:
        await services.store_call(services.store.delete_prefix, prefix)
    except Exception:
        log.exception("store sweep could not remove a folder", extra={**extra, "prefix": prefix})
        return False
    log.info("store sweep removed a folder", extra={**extra, "prefix": prefix})
    return True


async def sweep_forever(
    services: Services, interval_s: float, *, removed_listener: Removed | None = None
) -> None:
    """Sweep every `interval_s`, the first time one interval after the start (a fresh replica has
    nothing urgent to sweep); a failed sweep is logged and tried again next time."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await sweep_store(services, removed_listener=removed_listener)
        except Exception:
            log.exception("store sweep failed")
