"""Micro-builds: the verses a translator confirms become part of the engine's weights
(docs/learning.md).

An nmt engine whose current revision reads fuzzy matches (`EngineRow.model_learns`) learns each
confirmed pair at once through its memory. Once `learning.micro_build_pairs` pairs were trained
since that revision's build, or the oldest of fewer is `learning.micro_build_after_s` old, the API
service starts a micro-build: an ordinary build of the engine (recorded, launched, reported and
published like any other, so its revision is immutable and hot-swapped, and the pairs confirmed
while it ran are replayed into it) whose options say `microBuild`: the job fine-tunes the current
revision, not the base model, for `learning.micro_build_steps` steps on the new pairs plus
`learning.micro_build_replay` training pairs per new pair, and skips scoring and pretranslating.

It is checked after every train-segment on such an engine and every `learning.micro_build_check_s`
by every replica; a build already running (any replica's, or the owner's) means not now. A build
the owner starts cancels a running micro-build (`supersede`), so the Serval clients' own builds
are never refused because of one. A micro-build keeps the engine's pretranslations: it makes none.
An engine opts out with the build option `"microBuilds": false` on the build that made its revision.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import UPDATE_ENGINES, Caller
from serval_api.db.models import BuildRow, BuildState, EngineRow, TrainSegmentRow, utcnow
from serval_api.errors import ServalError
from serval_api.service.build_start import start_build
from serval_api.service.context import Services
from serval_common.build_options import MICRO_BUILD_OPTION, is_micro_build
from serval_common.families import family, names
from serval_common.settings import LearningSettings

log = logging.getLogger(__name__)

MICRO_BUILD = MICRO_BUILD_OPTION
"""The build option that makes a build a micro-build: `{"parentRevision", "newPairs", "replay"}`."""
MICRO_BUILDS = "microBuilds"
"""The build option that turns micro-builds off for the revision it makes (`false`)."""
NAME = "micro-build"
SWEEP_LIMIT = 500
"""Engines looked at per sweep (those with a pair old enough that no build trained on)."""


@dataclass(frozen=True)
class Due:
    """A micro-build to start: the revision it continues and how many pairs are new since."""

    engine_id: str
    owner: str
    parent_revision: int
    new_pairs: int


async def due(s: AsyncSession, engine: EngineRow, learning: LearningSettings, now: datetime) -> Due | None:
    if learning.micro_build_pairs == 0 or not family(engine.type).micro_builds or not engine.model_learns:
        return None
    if engine.is_building or engine.model_revision == 0:
        return None
    parent = await s.scalar(
        select(BuildRow).where(
            BuildRow.engine_id == engine.id,
            BuildRow.target_model_revision == engine.model_revision,
            BuildRow.state == BuildState.COMPLETED.value,
        )
    )
    if parent is None or (parent.options or {}).get(MICRO_BUILDS) is False:
        return None
    new, oldest, newest = (
        await s.execute(
            select(
                func.count(), func.min(TrainSegmentRow.created_at), func.max(TrainSegmentRow.created_at)
            ).where(
                TrainSegmentRow.engine_id == engine.id,
                TrainSegmentRow.id > (parent.train_segments_through or 0),
            )
        )
    ).one()
    if not new or oldest is None:
        return None
    if await _superseded_since(s, engine.id, _aware(newest, now)):
        return None
    if (
        new < learning.micro_build_pairs
        and (now - _aware(oldest, now)).total_seconds() < learning.micro_build_after_s
    ):
        return None
    return Due(engine.id, engine.owner, engine.model_revision, int(new))


def _aware(moment: datetime, now: datetime) -> datetime:
    """SQLite gives back naive datetimes (UTC)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=now.tzinfo)


async def _superseded_since(s: AsyncSession, engine_id: str, newest_pair: datetime) -> bool:
    """Whether the engine's latest build is a micro-build canceled after its newest pair: the owner
    started a build in its place (which trains on every pair), or canceled it. It is not started
    again until another pair is confirmed."""
    latest = await s.scalar(
        select(BuildRow)
        .where(BuildRow.engine_id == engine_id)
        .order_by(BuildRow.date_created.desc())
        .limit(1)
    )
    if latest is None or latest.state != BuildState.CANCELED.value or not is_micro_build(latest.options):
        return False
    finished = latest.date_finished
    return finished is not None and _aware(finished, newest_pair) >= newest_pair


def options(found: Due, learning: LearningSettings) -> dict[str, Any]:
    return {
        MICRO_BUILD: {
            "parentRevision": found.parent_revision,
            "newPairs": found.new_pairs,
            "replay": learning.micro_build_replay,
        },
        "maxSteps": learning.micro_build_steps,
    }


async def start_if_due(services: Services, engine_id: str) -> BuildRow | None:
    """Start the engine's micro-build if one is due; never raises (a refusal is logged)."""
    learning = services.settings.learning
    try:
        async with services.db.session() as s:
            engine = await s.get(EngineRow, engine_id)
            found = None if engine is None else await due(s, engine, learning, utcnow())
        if found is None:
            return None
        caller = Caller(owner=found.owner, scopes=frozenset({UPDATE_ENGINES}))
        build = await start_build(
            services,
            caller,
            engine_id,
            name=NAME,
            pretranslate=[],
            options=options(found, learning),
            supersede=False,
        )
    except ServalError as exc:
        log.info("micro-build not started", extra={"engine_id": engine_id, "reason": str(exc)})
        return None
    except Exception:
        log.exception("micro-build could not start", extra={"engine_id": engine_id})
        return None
    log.info(
        "micro-build started",
        extra={"engine_id": engine_id, "build_id": build.id, "pairs": found.new_pairs},
    )
    return build


_pending: set[asyncio.Task[BuildRow | None]] = set()


def check_soon(services: Services, engine_id: str) -> None:
    """Check the engine after a train-segment, without delaying the client's answer."""
    if services.settings.learning.micro_build_pairs == 0:
        return
    task = asyncio.create_task(start_if_due(services, engine_id), name=f"micro-build-check-{engine_id}")
    _pending.add(task)
    task.add_done_callback(_pending.discard)


def _aged_query(learning: LearningSettings, now: datetime) -> Select[str]:
    """Engines that learn, are not building, and have a pair older than `micro_build_after_s` that
    their current revision's build did not train on: the candidates of a sweep (`due` decides)."""
    cutoff = now - timedelta(seconds=learning.micro_build_after_s)
    untrained = (
        select(TrainSegmentRow.id)
        .join(
            BuildRow,
            (BuildRow.engine_id == TrainSegmentRow.engine_id)
            & (BuildRow.target_model_revision == EngineRow.model_revision)
            & (BuildRow.state == BuildState.COMPLETED.value),
        )
        .where(
            TrainSegmentRow.engine_id == EngineRow.id,
            TrainSegmentRow.id > func.coalesce(BuildRow.train_segments_through, 0),
            TrainSegmentRow.created_at <= cutoff,
        )
    )
    return (
        select(EngineRow.id)
        .where(
            EngineRow.model_learns,
            EngineRow.type.in_(names(where=lambda f: f.micro_builds)),
            EngineRow.is_building.is_(False),
            untrained.exists(),
        )
        .limit(SWEEP_LIMIT)
    )


async def sweep_forever(services: Services) -> None:
    """Every `learning.micro_build_check_s`: start the micro-builds that came due by age."""
    learning = services.settings.learning
    while True:
        await asyncio.sleep(learning.micro_build_check_s)
        if learning.micro_build_pairs == 0:
            continue
        try:
            async with services.db.session() as s:
                engine_ids = (await s.scalars(_aged_query(learning, utcnow()))).all()
            for engine_id in engine_ids:
                await start_if_due(services, engine_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("micro-build sweep failed; trying again later")
