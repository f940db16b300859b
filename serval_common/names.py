"""Names that become part of model store keys and local paths, checked alike wherever they enter:
the API service, build jobs, the `serval admin base-model` commands and manifests."""

from __future__ import annotations

import re

BASE_MODEL_NAME_CHARS = 100
_BASE_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def base_model_name_problem(name: str) -> str | None:
    """Why `name` cannot name a base model (`base-models/{name}/`), or None when it can: 1 to
    100 ASCII letters, digits, `.`, `_` or `-`, starting with a letter or digit, without `..`."""
    if not isinstance(name, str) or not _BASE_MODEL_NAME.fullmatch(name):
        return (
            "a base model name is 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if len(name) > BASE_MODEL_NAME_CHARS:
        return f"a base model name is at most {BASE_MODEL_NAME_CHARS} characters"
    if ".." in name:
        return "a base model name cannot hold '..'"
    return None


class InvalidName(ValueError):
    pass


def check_base_model_name(name: str) -> str:
    problem = base_model_name_problem(name)
    if problem is not None:
        shown = name if len(name) <= 60 else name[:60] + "…"
        raise InvalidName(f"base model {shown!a}: {problem}")
    return name


ID_CHARS = 64
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_id(field: str, value: str) -> str:
    """An engine or build id as it appears in store keys (`models/{engineId}/…`,
    `builds/{buildId}/…`): one segment, the API service's id rule."""
    if not (len(value) <= ID_CHARS and _ID.fullmatch(value)):
        shown = value if len(value) <= 60 else value[:60] + "…"
        raise InvalidName(f"{field} {shown!a} is not a valid id")
    return value
