"""Model revisions of builds that did not complete.

Each build is given a revision number of its own (`EngineRow.next_model_revision`), and the engine
moves to it only when the build completes. A build that faults or is canceled never serves its
revision, so whatever its job wrote under `models/{engineId}/{revision}/` (a partial upload, or
a manifest written just before the cancel) is removed: when the build is marked Faulted or
Canceled, and again when its job exits, which catches what a job wrote after it was marked.
"""

from __future__ import annotations

import logging

from serval_api.db.models import BuildRow, BuildState, EngineRow
from serval_api.service.context import Services
from serval_common.manifest import ForeignRevision, remove_revision

log = logging.getLogger(__name__)


async def discard_unfinished(services: Services, build: BuildRow) -> None:
    """Remove the revision folder of a build that ended other than Completed; anything else is
    left alone."""
    if build.build_state.is_running or build.build_state == BuildState.COMPLETED:
        return
    await discard(services, build.engine_id, build.target_model_revision, build.id)


async def discard(services: Services, engine_id: str, revision: int, build_id: str) -> None:
    """Remove `models/{engine_id}/{revision}/` as build `build_id` wrote it. A store failure is
    logged, not raised: the folder's revision is never given again nor served."""
    extra = {"engine_id": engine_id, "build_id": build_id, "revision": revision}
    try:
        removed = await services.store_call(
            remove_revision, services.store, engine_id, revision, build_id=build_id
        )
    except ForeignRevision as e:
        log.warning("revision folder left alone", extra={**extra, "reason": str(e)})
        return
    except Exception:
        log.exception("could not remove an unpublished revision folder", extra=extra)
        return
    if removed:
        log.info("unpublished revision folder removed", extra={**extra, "objects": removed})


def take_revision(engine: EngineRow) -> int:
    """The engine's next revision number, used up whatever becomes of the build given it; call
    with the engine's row locked."""
    revision = engine.next_model_revision
    engine.next_model_revision = revision + 1
    return revision
