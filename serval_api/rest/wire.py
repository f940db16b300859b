"""The base of every REST wire shape: camelCase on the wire, snake_case in Python."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from serval_api.service.options_json import OptionsNotAnObject, options_object


class Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class ResourceLink(Model):
    id: str
    url: str


def _options(value: object) -> dict[str, Any] | None:
    try:
        return options_object(value)
    except OptionsNotAnObject as e:
        raise PydanticCustomError("options", str(e)) from None


NmtBuildOptions = Annotated[
    dict[str, Any] | None,
    BeforeValidator(_options),
    WithJsonSchema(
        {
            "anyOf": [{"type": "object"}, {"type": "string"}, {"type": "null"}],
            "description": "A JSON object of build options, or a string that holds one (as Serval "
            "accepts); read back as the object.",
        }
    ),
]
"""A build config's `options` (Serval's `object`): a JSON object or a string holding one."""
