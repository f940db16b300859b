"""Build options: the JSON object a client passes in BuildConfig.options.

The API service checks them when a build starts and the build job parses them again, so both sides
agree on one definition. A known key with a bad value is refused (400). A key the engine family
does not take is ignored, as Serval's `StartBuild` accepts any JSON object and passes it on (its
clients send options meant for Serval's own jobs, such as `use_key_terms`): the build keeps and
passes on every key, and `ignored_keys` names the ignored ones, which the build's diagnostics list
so that a misspelt option still shows."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from serval_common.names import base_model_name_problem

LrSchedule = Literal["constant", "linear", "cosine"]
FreezablePart = Literal["embeddings", "encoder", "decoder"]


class BuildOptionsError(ValueError):
    pass


class JobOptions(BaseModel):
    """What every family's build options share; each family adds its own (`EngineFamily.options`)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    clearml_queue: str | None = Field(
        default=None, alias="clearmlQueue", description="ClearML queue for this build's job"
    )

    @classmethod
    def parse(cls, text: str) -> Self:
        """Parse the JSON text; a `BuildOptionsError` says what is wrong in words a client can use."""
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

    @classmethod
    def known_keys(cls) -> frozenset[str]:
        """Every key these options take: each field's wire name (its alias) and its Python name."""
        return frozenset(key for name, f in cls.model_fields.items() for key in (name, f.alias or name))

    @classmethod
    def ignored_keys(cls, raw: Mapping[str, object]) -> list[str]:
        """The keys of `raw` these options do not take, in the order sent."""
        known = cls.known_keys()
        return [key for key in raw if key not in known]


class BuildOptions(JobOptions):
    """The options of `nmt` (and `echo`) builds."""

    base_model: str | None = Field(
        default=None,
        alias="baseModel",
        description="name of a base model an administrator published (`serval admin base-model`): "
        "1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit, without '..'",
    )
    max_steps: int = Field(default=1000, alias="maxSteps", ge=1, description="optimizer steps at most")
    time_budget_s: float = Field(
        default=1800, alias="timeBudgetS", gt=0, description="training stops after this many seconds"
    )
    learning_rate: float = Field(
        default=1e-3,
        alias="learningRate",
        gt=0,
        le=1,
        description="peak AdamW learning rate; 1e-3 suits the tiny model, use ~1e-4 or lower "
        "for a real NLLB-200 checkpoint",
    )
    lr_schedule: LrSchedule = Field(
        default="constant",
        alias="lrSchedule",
        description="after warm-up: keep the rate (constant) or decay it to zero by maxSteps",
    )
    warmup_steps: int = Field(default=0, alias="warmupSteps", ge=0, description="linear warm-up steps")
    freeze: list[FreezablePart] = Field(
        default_factory=list, description="parameter groups left untouched by training"
    )
    batch_size: int = Field(default=16, alias="batchSize", ge=1, le=1024)
    gradient_accumulation: int = Field(default=1, alias="gradientAccumulation", ge=1, le=256)
    max_length: int = Field(
        default=128, alias="maxLength", ge=4, le=1024, description="tokens per side, codes included"
    )
    eval_share: float = Field(
        default=0.05,
        alias="evalShare",
        ge=0,
        lt=1,
        description="share of pairs held out for scoring (at least one pair)",
    )
    quantization: str | None = Field(default="int8", description="CTranslate2 quantization")
    pretranslate_beams: int = Field(
        default=4, alias="pretranslateBeams", ge=1, le=32, description="beam size for pretranslation"
    )
    pretranslate_batch_size: int = Field(
        default=64, alias="pretranslateBatchSize", ge=1, le=4096, description="segments per CTranslate2 call"
    )
    seed: int = 0

    @field_validator("base_model")
    @classmethod
    def _base_model_name(cls, value: str | None) -> str | None:
        problem = None if value is None else base_model_name_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value
