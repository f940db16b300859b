"""Engine families: what each of Serval's engine types answers, how it is built and which node
backend serves it, declared once (`builtin.py`) and asked by the API service, the build jobs and
the nodes (`family(engine.type).learns`, `of_backend(manifest.backend)`)."""

from serval_common.families.builtin import (
    CTRANSLATE2,
    DEFAULT_NODE_FAMILY,
    ECHO,
    ECHO_WORD_ALIGNMENT,
    NMT,
    SMT_TRANSFER,
    STATISTICAL,
)
from serval_common.families.family import EngineFamily, Kind, Operation
from serval_common.families.registry import (
    UnknownFamily,
    families,
    family,
    names,
    of_backend,
    of_spelling,
    of_wire,
    register,
)

__all__ = [
    "CTRANSLATE2",
    "DEFAULT_NODE_FAMILY",
    "ECHO",
    "ECHO_WORD_ALIGNMENT",
    "NMT",
    "SMT_TRANSFER",
    "STATISTICAL",
    "EngineFamily",
    "Kind",
    "Operation",
    "UnknownFamily",
    "families",
    "family",
    "names",
    "of_backend",
    "of_spelling",
    "of_wire",
    "register",
]
