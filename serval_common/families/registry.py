"""The registry of engine families: one `EngineFamily` per name, registered once at import."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from serval_common.families.family import EngineFamily, Kind

_FAMILIES: dict[str, EngineFamily] = {}


class UnknownFamily(ValueError):
    pass


def register(family: EngineFamily) -> EngineFamily:
    known = _FAMILIES.get(family.name)
    if known is not None and known != family:
        raise ValueError(f"engine family {family.name!r} is registered twice")
    if family.backend is not None and any(
        f.backend == family.backend and f.name != family.name for f in _FAMILIES.values()
    ):
        raise ValueError(f"model backend {family.backend!r} belongs to two families")
    _FAMILIES[family.name] = family
    return family


def family(name: str) -> EngineFamily:
    """The family of an engine type; `UnknownFamily` for a name no family has."""
    try:
        return _FAMILIES[name]
    except KeyError:
        known = ", ".join(sorted(_FAMILIES))
        raise UnknownFamily(f"unknown engine type {name!r}; known: {known}") from None


def families() -> Iterable[EngineFamily]:
    return tuple(_FAMILIES.values())


def names(kind: Kind | None = None, *, where: Callable[[EngineFamily], bool] | None = None) -> frozenset[str]:
    """The names of the families of `kind` (all without one) for which `where` holds, e.g.
    `names(where=lambda f: f.learns)`."""
    return frozenset(
        f.name for f in _FAMILIES.values() if (kind is None or f.kind is kind) and (where is None or where(f))
    )


def of_spelling(value: str) -> EngineFamily | None:
    """The family an engine type names in any of Serval's spellings: REST's kebab-case
    (`smt-transfer`), gRPC's and the C# enum's PascalCase (`SmtTransfer`), snake_case, in any
    letter case and with blanks around it. None: no family's name."""
    key = _loose(value)
    for f in _FAMILIES.values():
        if _loose(f.name) == key:
            return f
    return None


def _loose(spelling: str) -> str:
    return spelling.strip().lower().replace("-", "").replace("_", "")


def of_backend(backend: str) -> EngineFamily:
    """The family whose model folders name `backend` in their manifest."""
    for f in _FAMILIES.values():
        if f.backend == backend:
            return f
    known = ", ".join(sorted(f.backend for f in _FAMILIES.values() if f.backend))
    raise UnknownFamily(f"unknown model backend {backend!r}; known: {known}")


def of_wire(value: int) -> EngineFamily | None:
    """The family a node protocol `EngineFamily` value names (None: one this service lacks)."""
    for f in _FAMILIES.values():
        if f.wire and f.wire == value:
            return f
    return None
