"""Build options: the JSON object a client passes in BuildConfig.options."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class BuildOptionsError(ValueError):
    pass


class BuildOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    base_model: str | None = Field(
        default=None, alias="baseModel", description="base model name in the store"
    )

    @classmethod
    def parse(cls, text: str) -> BuildOptions:
        try:
            raw = json.loads(text or "{}")
        except json.JSONDecodeError as exc:
            raise BuildOptionsError(f"build options are not valid JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise BuildOptionsError("build options must be a JSON object")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise BuildOptionsError(f"invalid build options: {problems}") from exc
