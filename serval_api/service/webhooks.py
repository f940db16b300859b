"""Webhooks a client registers: `POST hooks {payloadUrl, secret, events}`; its events on the
caller's builds are delivered from the outbox (`serval_api/webhooks/`). The secret signs
deliveries and is never returned or logged."""

from __future__ import annotations

import logging

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from serval_api.auth import CREATE_HOOKS, DELETE_HOOKS, READ_HOOKS, Caller
from serval_api.db.models import WebhookRow, utcnow
from serval_api.errors import InvalidArgument, NotFound
from serval_api.service import limits
from serval_api.service.context import Services
from serval_api.service.keys import new_id
from serval_api.webhooks.addresses import AddressPolicy, check_payload_url
from serval_api.webhooks.events import WebhookEvent

log = logging.getLogger(__name__)

SECRET_CHARS = limits.column_width(WebhookRow, "secret")
EVENT_NAMES = tuple(e.value for e in WebhookEvent)


async def create_hook(
    services: Services, caller: Caller, *, payload_url: str, secret: str, events: list[str]
) -> WebhookRow:
    caller.require(CREATE_HOOKS)
    parts = check_payload_url(payload_url, AddressPolicy(services.settings.webhooks.allowed_networks))
    if not secret:
        raise InvalidArgument("secret must not be empty")
    if len(secret) > SECRET_CHARS or "\x00" in secret:
        raise InvalidArgument(f"secret: at most {SECRET_CHARS} characters, no NUL")
    limits.items("events", events, len(EVENT_NAMES))
    unknown = [e for e in events if e not in EVENT_NAMES]
    if unknown:
        raise InvalidArgument(
            f"events: unknown {limits.shown(unknown[0])}; expected one of {', '.join(EVENT_NAMES)}"
        )
    if not events:
        raise InvalidArgument("events: name at least one event")
    cap = services.settings.webhooks.max_hooks_per_owner
    async with services.db.session() as s:
        count = await s.scalar(
            select(func.count()).select_from(WebhookRow).where(WebhookRow.owner == caller.owner)
        )
    if (count or 0) >= cap:
        raise InvalidArgument(f"an owner may register at most {cap} hooks; delete one first")
    hook = WebhookRow(
        id=new_id(),
        owner=caller.owner,
        payload_url=payload_url,
        secret=secret,
        events=sorted(set(events), key=EVENT_NAMES.index),
        date_created=utcnow(),
    )
    async with services.db.session() as s:
        s.add(hook)
    log.info("webhook created", extra={"hook_id": hook.id, "host": parts.hostname, "events": hook.events})
    return hook


async def list_hooks(services: Services, caller: Caller) -> list[WebhookRow]:
    caller.require(READ_HOOKS)
    query = (
        select(WebhookRow)
        .where(WebhookRow.owner == caller.owner)
        .order_by(WebhookRow.date_created, WebhookRow.id)
    )
    async with services.db.session() as s:
        return list((await s.scalars(query)).all())


async def get_hook(services: Services, caller: Caller, hook_id: str) -> WebhookRow:
    caller.require(READ_HOOKS)
    async with services.db.session() as s:
        return await _owned_hook(s, caller, hook_id)


async def delete_hook(services: Services, caller: Caller, hook_id: str) -> None:
    """Its pending deliveries go with it (the outbox rows cascade)."""
    caller.require(DELETE_HOOKS)
    async with services.db.session() as s:
        await s.delete(await _owned_hook(s, caller, hook_id))
    log.info("webhook deleted", extra={"hook_id": hook_id})


async def _owned_hook(s: AsyncSession, caller: Caller, hook_id: str) -> WebhookRow:
    hook = await s.get(WebhookRow, hook_id) if limits.can_be_id(hook_id) else None
    if hook is None or hook.owner != caller.owner:
        raise NotFound(f"webhook {limits.shown(hook_id)} not found")
    return hook
