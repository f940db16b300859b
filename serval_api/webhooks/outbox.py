"""The durable outbox: build events become `WebhookDeliveryRow` rows in the transaction that
changes the build, so an event is recorded exactly when its change is, whatever happens after
the commit (the delivery worker sends them, `delivery.py`)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.db.models import (
    BuildRow,
    DeliveryState,
    EngineRow,
    EngineType,
    WebhookDeliveryRow,
    WebhookRow,
    utcnow,
)
from serval_api.service.keys import new_id
from serval_api.urls import build_url, engine_url
from serval_api.webhooks.events import WebhookEvent

WEBHOOK_DELIVERIES = "webhook-deliveries"
"""The change key notified after deliveries are enqueued: it wakes the delivery workers."""


def build_events(
    build: BuildRow, *, was_running: bool, was_started: bool, word_alignment: bool = False
) -> list[WebhookEvent]:
    """The events of one change of `build`: started the first time it gets a start date (a
    restarted build does not start again), finished when it leaves Pending/Active.
    `word_alignment`: the build is a word-alignment engine's, whose events are WordAlignment*."""
    started, finished = (
        (WebhookEvent.WORD_ALIGNMENT_BUILD_STARTED, WebhookEvent.WORD_ALIGNMENT_BUILD_FINISHED)
        if word_alignment
        else (WebhookEvent.TRANSLATION_BUILD_STARTED, WebhookEvent.TRANSLATION_BUILD_FINISHED)
    )
    events = []
    if not was_started and build.date_started is not None:
        events.append(started)
    if was_running and not build.build_state.is_running:
        events.append(finished)
    return events


async def enqueue_build_events(
    s: AsyncSession, build: BuildRow, *, was_running: bool, was_started: bool, base_url: str
) -> int:
    """Add one delivery per event of this change and hook of the build's owner that wants it;
    returns how many. Call it in the session that changes the build, before it commits."""
    engine = await s.get(EngineRow, build.engine_id)
    word_alignment = engine is not None and EngineType(engine.type).is_word_alignment
    events = build_events(
        build, was_running=was_running, was_started=was_started, word_alignment=word_alignment
    )
    if not events:
        return 0
    hooks = (
        await s.scalars(select(WebhookRow).where(WebhookRow.owner == build.owner).order_by(WebhookRow.id))
    ).all()
    now = utcnow()
    count = 0
    for event in events:
        body = event_body(event, build, base_url)
        for hook in hooks:
            if event.value in hook.events:
                s.add(
                    WebhookDeliveryRow(
                        id=new_id(),
                        hook_id=hook.id,
                        owner=build.owner,
                        event=event.value,
                        build_id=build.id,
                        body=body,
                        state=DeliveryState.PENDING.value,
                        attempts=0,
                        next_attempt_at=now,
                        # Rows of one change are claimed in the order they were enqueued (Started first).
                        created_at=now + timedelta(microseconds=count),
                    )
                )
                count += 1
    return count


def event_body(event: WebhookEvent, build: BuildRow, base_url: str) -> str:
    """The JSON text Serval sends for `event`; these exact bytes are signed and POSTed."""
    wa = event in (WebhookEvent.WORD_ALIGNMENT_BUILD_STARTED, WebhookEvent.WORD_ALIGNMENT_BUILD_FINISHED)
    payload: dict[str, Any] = {
        "build": {"id": build.id, "url": build_url(base_url, build.engine_id, build.id, word_alignment=wa)},
        "engine": {"id": build.engine_id, "url": engine_url(base_url, build.engine_id, word_alignment=wa)},
    }
    if event in (WebhookEvent.TRANSLATION_BUILD_FINISHED, WebhookEvent.WORD_ALIGNMENT_BUILD_FINISHED):
        payload["buildState"] = build.state
        payload["message"] = build.message
        payload["dateFinished"] = (build.date_finished or utcnow()).isoformat()
    return json.dumps({"event": event.value, "payload": payload}, separators=(",", ":"), ensure_ascii=False)
