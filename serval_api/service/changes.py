"""In-process wake-ups for long polls: one event per key, replaced each time it fires.

Only changes made by this API replica wake its waiters; several replicas would need the
database's notifications (PostgreSQL LISTEN/NOTIFY) feeding `notify`.
"""

from __future__ import annotations

import asyncio


class ChangeNotifier:
    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def event(self, key: str) -> asyncio.Event:
        """Take the event *before* reading the state it guards, so no change slips between."""
        return self._events.setdefault(key, asyncio.Event())

    def notify(self, *keys: str) -> None:
        for key in keys:
            event = self._events.pop(key, None)
            if event is not None:
                event.set()


def build_key(build_id: str) -> str:
    return f"build:{build_id}"


def engine_key(engine_id: str) -> str:
    return f"engine:{engine_id}"
