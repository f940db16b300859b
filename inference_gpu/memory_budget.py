"""The node's memory budget (`node.memory_budget_bytes`): making room for a model by unloading the
least recently used idle models, with all their aliases.

The budget counts each loaded model once, by what it holds (`ServedModel.size_bytes`, read again
whenever it is counted): an NMT model's files, an `smt-transfer` model's worker process's resident
memory, which grows as it learns. Before a load the family's estimate is set aside
(`ServedModel.estimated_bytes`); a model found larger once loaded has more idle models unloaded.
A model with work routed to it is never unloaded: when only such models are left, the load fails
(`MemoryBudgetExceeded`).

It stands apart from the model manager because it decides which models go, not how: the manager
hands it what the node holds and the way to unload one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from inference_gpu.held_models import HeldModels
from inference_gpu.loaded_model import LoadedModel
from inference_gpu.metrics import NodeMetrics
from serval_common.model_revision import short_weights
from serval_common.settings import Settings

log = logging.getLogger("inference_gpu.model_manager")
"""The model manager's logger: these records are the manager's."""


class MemoryBudgetExceeded(RuntimeError):
    """The model does not fit the node's memory budget even after unloading every idle model."""


class MemoryBudget:
    def __init__(
        self,
        settings: Settings,
        held: HeldModels,
        unload: Callable[[LoadedModel], Awaitable[None]],
        metrics: NodeMetrics | None = None,
    ) -> None:
        self._settings = settings
        self._held = held
        self._unload = unload
        self._metrics = metrics

    async def make_room(self, loading: LoadedModel, size: int, *, loaded_already: bool = False) -> None:
        """Unload least recently used idle models until `size` more bytes fit the budget. With
        `loaded_already` (the model turned out larger than estimated once loaded) whatever cannot
        be freed is logged, not refused: the model holds its memory already."""
        budget = self._settings.node.memory_budget_bytes
        if budget <= 0:
            return
        while True:
            # Models loading count once their size is known (they passed this check already).
            others = [m for m in self._held.by_weights.values() if m is not loading and m.size > 0]
            used = sum(m.held_bytes() for m in others)
            if used + size <= budget:
                return
            idle = [m for m in others if m.ready and self._held.idle(m)]
            if not idle and loaded_already:
                log.warning(
                    "a loaded model holds more than estimated and the memory budget is exceeded",
                    extra={
                        "weights": loading.name,
                        "size_bytes": size,
                        "used_bytes": used,
                        "budget_bytes": budget,
                    },
                )
                return
            if not idle:
                busy = ", ".join(sorted(a for m in others for a in m.aliases)) or "none"
                raise MemoryBudgetExceeded(
                    f"model {short_weights(loading.weights)} needs {size} bytes but the node's memory "
                    f"budget is {budget} bytes with {used} bytes held by models in use ({busy})"
                )
            victim = min(idle, key=lambda m: m.last_used)
            log.info(
                "unloading least recently used model to fit the memory budget",
                extra={"weights": victim.name, "revisions": list(victim.aliases)},
            )
            if self._metrics is not None:
                self._metrics.evictions.inc()
            await self._unload(victim)
