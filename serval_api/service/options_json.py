"""A build's `options` as clients send them: a JSON object, or (as SIL's helpers send it, and
Serval's `StartBuild` parses `options.ToString()`) a string that holds one. gRPC's `StartBuild`
always carries the string form. Both transports read it through `options_object`. Anything else
is refused with Serval's words (`StartBuild.cs` `MapOptions`: "Unable to parse field 'options'"),
which its clients look for, and what to send instead."""

from __future__ import annotations

import json
from typing import Any

UNPARSABLE = "Unable to parse field 'options'"
"""How Serval's `StartBuild` begins the message of options that are no JSON object."""


class OptionsNotAnObject(ValueError):
    """The options are neither a JSON object nor a string holding one; the text says what to send."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"{UNPARSABLE}: {problem}")


def options_object(value: object) -> dict[str, Any] | None:
    """`value` (None, a dict, or JSON text) as an options object; None stays None."""
    if value is None or isinstance(value, dict):
        return value
    if not isinstance(value, str):
        raise OptionsNotAnObject(f"expected a JSON object or a string that holds one, not {_kind(value)}")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise OptionsNotAnObject(
            f"the string is not valid JSON ({e.msg}); send a JSON object or a string that holds one"
        ) from None
    except RecursionError:
        raise OptionsNotAnObject("nested too deeply") from None
    if not isinstance(parsed, dict):
        raise OptionsNotAnObject(f"the string holds {_kind(parsed)}; it must hold a JSON object")
    return parsed


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "null" if value is None else f"a {type(value).__name__}"
