"""The owner check of every owned entity a client names in a path (engine, data file, corpus), as
Serval's `CheckOwnerAsync`: missing answers 404 / NOT_FOUND, another owner's 403 /
PERMISSION_DENIED. Ids are random, so a 403 tells a stranger nothing it can use; listings still
show only the caller's own. An id named inside a request body (a corpus's `fileId`, a parallel
corpus's `sourceCorpusIds`) is the caller's input, refused with 400 whoever owns it."""

from __future__ import annotations

from typing import Protocol, TypeVar

from serval_api.auth import Caller
from serval_api.errors import NotFound, PermissionDenied
from serval_api.service import limits


class Owned(Protocol):
    @property
    def owner(self) -> str: ...


T = TypeVar("T", bound=Owned)


def not_found(what: str, entity_id: str) -> NotFound:
    return NotFound(f"{what} {limits.shown(entity_id)} not found")


def check_owner(entity: T | None, caller: Caller, what: str, entity_id: str) -> T:
    """`entity` when it exists and `caller` owns it."""
    if entity is None:
        raise not_found(what, entity_id)
    if entity.owner != caller.owner:
        raise PermissionDenied(
            f"{what} {limits.shown(entity_id)} belongs to another client; use the id of one of yours"
        )
    return entity
