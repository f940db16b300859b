"""What an engine family is: the one declaration every component reads.

An engine family is one of Serval's engine types (`nmt`, `smt-transfer`, `statistical`, `echo`,
`echo-word-alignment`). The API service, the build jobs and the nodes ask its `EngineFamily`
what it answers, how it is built and which node backend serves it, instead of comparing type
strings; adding a family is one module that declares it and one `register` call
(`serval_common/families/builtin.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from serval_common.build_options import JobOptions


class Kind(StrEnum):
    """Which of Serval's two APIs a family's engines live under."""

    TRANSLATION = "translation"
    """`/translation/engines`: translate, n-best, prefix, word graph, train segment, pretranslate."""
    WORD_ALIGNMENT = "word-alignment"
    """`/word-alignment/engines`: align a pair, word-align a corpus."""


class Operation(StrEnum):
    """What a client may ask of an engine between builds."""

    TRANSLATE = "translate"
    TRANSLATE_PREFIX = "translate-prefix"
    WORD_GRAPH = "word-graph"
    TRAIN_SEGMENT = "train-segment"
    ALIGN = "align"


TRANSLATION_OPERATIONS = frozenset(
    {Operation.TRANSLATE, Operation.TRANSLATE_PREFIX, Operation.WORD_GRAPH, Operation.TRAIN_SEGMENT}
)
ALIGNMENT_OPERATIONS = frozenset({Operation.ALIGN})


@dataclass(frozen=True)
class EngineFamily:
    name: str
    """Serval's engine type, as clients send it and the database stores it."""
    kind: Kind
    options: type[JobOptions]
    """The build options its builds take (`BuildConfig.options`), checked when a build starts and
    parsed again by its build job."""
    job: str | None
    """`module:Class` of its build job (a `build_jobs.template.FamilyBuildJob`); None: its builds
    run inside the API service."""
    backend: str | None
    """The manifest `backend` of its model folders, which a node loads with this family's model
    class; None: it has no model and is answered by the API service itself (the echo families)."""
    node_model: str | None = None
    """`module:Class` of the node's `ServedModel` for it (None: not served by nodes)."""
    wire: int = 0
    """Its value of the node protocol's `EngineFamily` enum (0: nodes never claim it)."""
    operations: frozenset[Operation] = frozenset()
    machine_source: Literal["NMT", "SMT"] = "NMT"
    """sil-machine's `TranslationSources` flag of the words its own model proposes."""
    learns: bool = False
    """Its models learn each train-segment pair between builds (sent to the nodes serving it)."""
    micro_builds: bool = False
    """Its revisions that learn pairs through fuzzy matches are followed by micro-builds, short
    fine-tunes on the confirmed pairs (docs/learning.md; its job continues a revision)."""
    pretranslates: bool = False
    """Its builds pretranslate the corpora's untranslated segments."""
    persisted_by_default: bool = False
    """A build keeps the model (`isModelPersisted`) unless the client says otherwise."""
    takes_base_model: bool = False
    """Its builds start from a named base model (`baseModel` in the build options)."""

    @property
    def served_here(self) -> bool:
        """Answered by the API service itself, with no model and no node."""
        return self.backend is None

    def answers(self, operation: Operation) -> bool:
        return operation in self.operations
