"""The builds feed: one owner's translation builds across all their engines, by creation or by
finish.

Serval's feed (`TranslationBuilds.GetAllBuildsCreatedAfter`, `GetNextFinishedBuild`) reads the
translation builds' collection: word-alignment builds are another collection there, and Serval has
no feed for them (sillsdev/serval: `Serval.Translation/Features/Builds/` holds the feed, and
`Serval.WordAlignment` none). So word-alignment builds (`statistical`, `echo-word-alignment`), whose
URLs lie under `/word-alignment/engines` and answer 404 as translation builds, are left out.

`next_finished`'s `finished-after` is, as in Serval (`GetNextFinishedBuild.cs`), the id of one of
the caller's builds: the answer is the first build to finish after it (by `dateFinished`, then id;
after now while that build has not finished). Serval waits from now for an id it does not find
(unknown, another owner's, a word-alignment build's), and so does this service. Omitted: from now.
This service's extension: an ISO-8601 date-time instead of an id (the first build to finish after
it); a value shaped like a date (`2024-…`) that is no date answers 400.

`next_finished` long-polls on `owner_builds_key(owner)`, which every change to one of the owner's
builds notifies (on PostgreSQL through NOTIFY, so a build finished through another replica wakes it).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, Select, and_, or_, select

from serval_api.auth import READ_ENGINES, Caller
from serval_api.db.models import TRANSLATION_TYPES, BuildRow, EngineRow, utcnow
from serval_api.errors import InvalidArgument
from serval_api.service import limits
from serval_api.service.changes import owner_builds_key
from serval_api.service.context import Services
from serval_api.service.long_poll import wait_until

# `2024-05-01T12:00:00 02:00`: an offset whose `+` an unencoded query string turned into a space.
_SPACED_OFFSET = re.compile(r"^(.*\d)\s+(\d{2}:?\d{2})$")
# What a client means as a date: `2024-05-01…` or `20240501…`. Build ids (24 hex digits, as
# Serval's) never have this shape, and a gRPC client's own build id that has it is looked up first.
_DATE_SHAPED = re.compile(r"^\s*\d{4}-?\d{2}-?\d{2}(?:$|[T\s])")


def parse_timestamp(name: str, value: str | None) -> datetime:
    """Serval's clients send `yyyy-MM-dd HH:mm:ssZ`; any ISO-8601 date or date-time is accepted,
    and one without an offset is UTC."""
    if value is None or not value.strip():
        raise InvalidArgument(f"{name}: required, as an ISO-8601 date-time such as 2024-05-01 12:00:00Z")
    text = value.strip()
    spaced = _SPACED_OFFSET.match(text)
    if spaced and ("T" in text or text.count(" ") > 1):
        text = f"{spaced[1]}+{spaced[2]}"
    try:
        stamp = datetime.fromisoformat(text)
        return stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)
    except (ValueError, OverflowError):
        raise InvalidArgument(
            f"{name}: {limits.shown(value)} is not an ISO-8601 date-time such as 2024-05-01 12:00:00Z"
        ) from None


def _translation_builds(owner: str) -> Select[BuildRow]:
    """The owner's builds of translation engines."""
    return (
        select(BuildRow)
        .join(EngineRow, EngineRow.id == BuildRow.engine_id)
        .where(BuildRow.owner == owner, EngineRow.type.in_([t.value for t in TRANSLATION_TYPES]))
    )


async def builds_created_after(
    services: Services, caller: Caller, created_after: str | None
) -> list[BuildRow]:
    """The caller's builds created after `created_after` (all of them without it), oldest first."""
    caller.require(READ_ENGINES)
    query = _translation_builds(caller.owner)
    if created_after is not None:
        query = query.where(BuildRow.date_created > parse_timestamp("created-after", created_after))
    async with services.db.session() as s:
        return list((await s.scalars(query.order_by(BuildRow.date_created, BuildRow.id))).all())


async def next_finished(services: Services, caller: Caller, finished_after: str | None) -> BuildRow:
    """The caller's build that finished first after `finished_after` (a build id, or a date-time;
    see the module's docstring), waiting for one up to the long-poll window (then 408)."""
    caller.require(READ_ENGINES)
    after = await _finished_after(services, caller, finished_after)
    query = (
        _translation_builds(caller.owner).where(after).order_by(BuildRow.date_finished, BuildRow.id).limit(1)
    )

    async def read() -> BuildRow | None:
        async with services.db.session() as s:
            return (await s.scalars(query)).first()

    build = await wait_until(
        services,
        owner_builds_key(caller.owner),
        read,
        lambda b: b is not None,
        caller=caller,
        timeout_message="no build finished within the poll window; poll again",
    )
    assert build is not None
    return build


async def _finished_after(services: Services, caller: Caller, value: str | None) -> ColumnElement[bool]:
    """Which builds count as finished after `value`: after one of the caller's translation builds
    (its `dateFinished`, then its id, as Serval orders them; now while it has not finished),
    after a date-time, or after now (no value, or an id Serval would not find either)."""
    text = (value or "").strip()
    if text and limits.can_be_id(text):
        async with services.db.session() as s:
            named = (await s.scalars(_translation_builds(caller.owner).where(BuildRow.id == text))).first()
        if named is not None:
            since = named.date_finished or utcnow()
            return or_(
                BuildRow.date_finished > since, and_(BuildRow.date_finished == since, BuildRow.id > named.id)
            )
    if text and _DATE_SHAPED.match(text):
        return BuildRow.date_finished > parse_timestamp("finished-after", text)
    return BuildRow.date_finished > utcnow()
