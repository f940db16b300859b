"""Turn command-line flags into the one Settings object (flags win over environment variables)."""

from __future__ import annotations

from typing import Any

from serval_common.settings import Settings


def load_settings(**flags: Any) -> Settings:
    """`load_settings(home=..., api__rest_port=8081)`: `__` separates section and field; None means unset."""
    overrides: dict[str, Any] = {}
    for name, value in flags.items():
        if value is None or value == []:
            continue
        section, _, field = name.partition("__")
        if field:
            overrides.setdefault(section, {})[field] = value
        else:
            overrides[section] = value
    return Settings(**overrides)
