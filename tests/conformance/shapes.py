"""Checks a JSON body against a shape of `serval_client` the way Newtonsoft.Json reads it into
the generated client's classes: every problem that would make deserialization throw (or hand the
caller a null where the client's type has none), with the path where it is.

Deliberately a little stricter than Newtonsoft in two places, because a Serval-compatible server
has no reason to rely on its leniency: property names must be camelCase exactly (Newtonsoft would
match them case-insensitively) and scalars must have their JSON type (Newtonsoft would turn a
number into a string, or `"true"` into a bool).
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any

from tests.conformance.serval_client import ENUMS_OF, OLDER, SCALARS, Property, shapes

_LIST = re.compile(r"^IList<(.+)>$")
_DICT = re.compile(r"^IDictionary<string, (.+)>$")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


def check(body: Any, type_name: str, path: str = "$", release: str = OLDER) -> list[str]:
    """Problems of `body` read as `type_name` (a shape, an enum, a scalar, `IList<T>`,
    `IDictionary<string, T>`, or `Shape[]` as the operations table writes a list) by the client of
    `release`; each one is `path: reason`. An empty list means the client reads it."""
    if type_name.endswith("[]"):
        type_name = f"IList<{type_name[:-2]}>"
    if body is None:
        return [f"{path}: null where the client expects {type_name}"]
    return _check_value(body, type_name, path, release)


def _check_value(value: Any, type_name: str, path: str, release: str) -> list[str]:
    enums = ENUMS_OF[release]
    if (item := _LIST.match(type_name)) is not None:
        if not isinstance(value, list):
            return [f"{path}: {_json_type(value)} where the client expects a list"]
        return [
            p for i, v in enumerate(value) for p in _check_element(v, item.group(1), f"{path}[{i}]", release)
        ]
    if (item := _DICT.match(type_name)) is not None:
        if not isinstance(value, dict):
            return [f"{path}: {_json_type(value)} where the client expects an object (dictionary)"]
        return [p for k, v in value.items() for p in _check_element(v, item.group(1), f"{path}.{k}", release)]
    if type_name in enums:
        if not isinstance(value, str) or value not in enums[type_name]:
            return [f"{path}: {value!r} is not a {type_name} ({', '.join(enums[type_name])})"]
        return []
    if type_name in SCALARS:
        reason = _scalar_problem(value, type_name)
        return [f"{path}: {reason}"] if reason else []
    properties = shapes(release).get(type_name)
    if properties is None:
        raise KeyError(f"no shape, enum or scalar named {type_name!r} in the {release} client")
    if not isinstance(value, dict):
        return [f"{path}: {_json_type(value)} where the client expects a {type_name} object"]
    return [p for prop in properties for p in _check_property(value, prop, path, release)]


def _check_element(value: Any, type_name: str, path: str, release: str) -> list[str]:
    """A null element is read as null for reference types and throws for value types."""
    if value is None:
        if type_name in SCALARS - {"string", "object"} or type_name in ENUMS_OF[release]:
            return [f"{path}: null in a list of {type_name}"]
        return []
    return _check_value(value, type_name, path, release)


def _check_property(body: dict[str, Any], prop: Property, path: str, release: str) -> list[str]:
    where = f"{path}.{prop.name}"
    if prop.name not in body:
        return [f"{where}: required property missing"] if prop.required else []
    value = body[prop.name]
    if value is None:
        if prop.may_be_null:
            return []
        return [f"{where}: null, but {'required' if prop.required else f'{prop.type} is not nullable'}"]
    return _check_value(value, prop.type, where, release)


def _scalar_problem(value: Any, type_name: str) -> str | None:
    if type_name == "object":
        return None
    if type_name == "string":
        return None if isinstance(value, str) else f"{_json_type(value)} where the client expects a string"
    if type_name == "bool":
        return None if isinstance(value, bool) else f"{_json_type(value)} where the client expects a bool"
    if type_name == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{_json_type(value)} where the client expects an int"
        if not -(2**31) <= value < 2**31:
            return f"{value} does not fit an int"
        return None
    if type_name in ("double", "float"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{_json_type(value)} where the client expects a {type_name}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{value} is not a finite {type_name}"
        return None
    if type_name == "DateTimeOffset":
        return _date_problem(value)
    raise KeyError(type_name)


def _date_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"{_json_type(value)} where the client expects an ISO-8601 date"
    if not _ISO_DATE.match(value):
        return f"{value!r} is not an ISO-8601 date and time"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return f"{value!r} is not an ISO-8601 date and time"
    if parsed.tzinfo is None:
        return f"{value!r} has no UTC offset"
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"bool {value!r}"
    if isinstance(value, int | float):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    return "an object"
