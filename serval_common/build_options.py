"""Build options: the JSON object a client passes in BuildConfig.options.

The API service checks them when a build starts and the build job parses them again, so both sides
agree on one definition. A known key with a bad value is refused (400). A key the engine family
does not take is ignored, as Serval's `StartBuild` accepts any JSON object and passes it on (its
clients send options meant for Serval's own jobs, such as `use_key_terms`): the build keeps and
passes on every key, and `ignored_keys` names the ignored ones, which the build's diagnostics list
so that a misspelt option still shows.

The training hyperparameters (`TRAINING_KEYS`) are not the code's to decide: a fine-tune takes each
from the build's options, else the deployment's settings (`jobs.*`), else the base model's manifest
(`training_defaults`), else the default written here, which suits a real NLLB-200 checkpoint
(`NmtBuildOptions.training`). The tiny demo model's manifest carries its own, faster rate."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from serval_common.names import base_model_name_problem

LrSchedule = Literal["constant", "linear", "cosine"]
FreezablePart = Literal["embeddings", "encoder", "decoder"]


class BuildOptionsError(ValueError):
    pass


# The training hyperparameters' types and bounds, shared by the build options, the deployment's
# settings and a base model's training defaults, so that each accepts exactly what the others do.
MaxSteps = Annotated[int, Field(ge=1)]
TimeBudgetS = Annotated[float, Field(gt=0)]
LearningRate = Annotated[float, Field(gt=0, le=1)]
WarmupSteps = Annotated[int, Field(ge=0)]
BatchSize = Annotated[int, Field(ge=1, le=1024)]
GradientAccumulation = Annotated[int, Field(ge=1, le=256)]
MaxLength = Annotated[int, Field(ge=4, le=1024)]
EvalShare = Annotated[float, Field(ge=0, lt=1)]

TRAINING_KEYS = (
    "max_steps",
    "time_budget_s",
    "learning_rate",
    "lr_schedule",
    "warmup_steps",
    "freeze",
    "batch_size",
    "gradient_accumulation",
    "max_length",
    "eval_share",
)
"""The build options a base model's manifest and the deployment's settings may give defaults for."""

HyperparameterSource = Literal["buildOptions", "deployment", "baseModel", "default"]
"""Where a fine-tune's hyperparameter came from, highest precedence first."""

SOURCE_WORDS: dict[str, str] = {
    "buildOptions": "build option",
    "deployment": "deployment setting",
    "baseModel": "base model default",
    "default": "default",
}


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


class TrainingDefaults(BaseModel):
    """Training hyperparameters a base model's manifest (`training_defaults`) gives the fine-tunes
    that start from it; None: not set. Names and bounds are the build options'."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    max_steps: MaxSteps | None = Field(default=None, alias="maxSteps")
    time_budget_s: TimeBudgetS | None = Field(default=None, alias="timeBudgetS")
    learning_rate: LearningRate | None = Field(default=None, alias="learningRate")
    lr_schedule: LrSchedule | None = Field(default=None, alias="lrSchedule")
    warmup_steps: WarmupSteps | None = Field(default=None, alias="warmupSteps")
    freeze: list[FreezablePart] | None = None
    batch_size: BatchSize | None = Field(default=None, alias="batchSize")
    gradient_accumulation: GradientAccumulation | None = Field(default=None, alias="gradientAccumulation")
    max_length: MaxLength | None = Field(default=None, alias="maxLength")
    eval_share: EvalShare | None = Field(default=None, alias="evalShare")

    @classmethod
    def checked(cls, **values: Any) -> TrainingDefaults:
        """Training defaults from Python names (`learning_rate=1e-4`), None values left out: what
        `serval admin base-model import --learning-rate …` passes to `publish_base_model`. A bad
        value raises `BuildOptionsError` naming it."""
        try:
            return cls.model_validate({k: v for k, v in values.items() if v is not None})
        except ValidationError as exc:
            raise BuildOptionsError(f"invalid training defaults: {_problems(exc)}") from exc

    def given(self) -> dict[str, Any]:
        """The values set, by Python name."""
        return self.model_dump(exclude_none=True)


class TrainingHyperparameters(BaseModel):
    """What a fine-tune used: every training hyperparameter's value and where it came from
    (a model revision's manifest keeps it; the build's diagnostics show it)."""

    values: TrainingDefaults
    sources: dict[str, HyperparameterSource]

    def wire(self) -> dict[str, Any]:
        """`{"learningRate": 0.0001, …, "sources": {"learningRate": "baseModel", …}}`: the build
        options' names, as a diagnostic's data carries them."""
        values = self.values.model_dump(by_alias=True, exclude_none=True)
        aliases = {name: field.alias or name for name, field in TrainingDefaults.model_fields.items()}
        return {**values, "sources": {aliases.get(k, k): v for k, v in self.sources.items()}}

    def describe(self) -> str:
        """`learningRate 0.001 (base model default), maxSteps 40 (build option), …`."""
        wire = self.wire()
        sources = wire.pop("sources")
        return ", ".join(
            f"{key} {json.dumps(value)} ({SOURCE_WORDS.get(sources.get(key, ''), 'default')})"
            for key, value in wire.items()
        )


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
            raise BuildOptionsError(f"invalid build options: {_problems(exc)}") from exc

    @classmethod
    def known_keys(cls) -> frozenset[str]:
        """Every key these options take: each field's wire name (its alias) and its Python name."""
        return frozenset(key for name, f in cls.model_fields.items() for key in (name, f.alias or name))

    @classmethod
    def ignored_keys(cls, raw: Mapping[str, object]) -> list[str]:
        """The keys of `raw` these options do not take, in the order sent."""
        known = cls.known_keys()
        return [key for key in raw if key not in known]


MICRO_BUILD_OPTION = "microBuild"
"""The build option the API service sets on the micro-builds it starts (`NmtBuildOptions.micro_build`)."""


def is_micro_build(options: dict[str, Any] | None) -> bool:
    """Whether a build's options (as recorded) make it a micro-build."""
    return bool((options or {}).get(MICRO_BUILD_OPTION))


class MicroBuild(BaseModel):
    """What the API service gives a micro-build (docs/learning.md): the revision it continues,
    how many of the build's pairs (the last ones) are new since that revision, and how many
    training pairs it replays per new pair."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    parent_revision: int = Field(ge=1, alias="parentRevision")
    new_pairs: int = Field(ge=1, alias="newPairs")
    replay: int = Field(default=4, ge=0, le=100)


class NmtBuildOptions(JobOptions):
    """The options of `nmt` (and `echo`) builds."""

    base_model: str | None = Field(
        default=None,
        alias="baseModel",
        description="name of a base model an administrator published (`serval admin base-model`): "
        "1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit, without '..'",
    )
    max_steps: MaxSteps = Field(default=1000, alias="maxSteps", description="optimizer steps at most")
    time_budget_s: TimeBudgetS = Field(
        default=1800, alias="timeBudgetS", description="training stops after this many seconds"
    )
    learning_rate: LearningRate = Field(
        default=1e-4,
        alias="learningRate",
        description="peak AdamW learning rate; unset: the deployment's, else the base model's default, "
        "else 1e-4, which suits a real NLLB-200 checkpoint",
    )
    lr_schedule: LrSchedule = Field(
        default="constant",
        alias="lrSchedule",
        description="after warm-up: keep the rate (constant) or decay it to zero by maxSteps",
    )
    warmup_steps: WarmupSteps = Field(default=0, alias="warmupSteps", description="linear warm-up steps")
    freeze: list[FreezablePart] = Field(
        default_factory=list, description="parameter groups left untouched by training"
    )
    batch_size: BatchSize = Field(default=16, alias="batchSize")
    gradient_accumulation: GradientAccumulation = Field(default=1, alias="gradientAccumulation")
    max_length: MaxLength = Field(
        default=128, alias="maxLength", description="tokens per side, codes included"
    )
    eval_share: EvalShare = Field(
        default=0.05, alias="evalShare", description="share of pairs held out for scoring (at least one pair)"
    )
    quantization: str | None = Field(default="int8", description="CTranslate2 quantization")
    fuzzy_matches: bool = Field(
        default=True,
        alias="fuzzyMatches",
        description="a fine-tune also trains on each source followed by the target of its best fuzzy "
        "match among the other pairs, and publishes a revision that reads its source so, with the "
        "memory of the build's pairs (Neural Fuzzy Repair); an inference-only build stays plain",
    )
    micro_builds: bool = Field(
        default=True,
        alias="microBuilds",
        description="whether the revision this build makes, when it reads fuzzy matches, is followed by "
        "micro-builds: short fine-tunes on the pairs confirmed with train-segment (docs/learning.md)",
    )
    micro_build: MicroBuild | None = Field(
        default=None,
        alias="microBuild",  # MICRO_BUILD_OPTION
        description="set by the service on the micro-builds it starts, never by a client: the revision it "
        "continues, the new pairs, the replay per new pair",
    )
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

    def training(
        self, deployment: TrainingDefaults | None = None, base_model: TrainingDefaults | None = None
    ) -> TrainingHyperparameters:
        """Each training hyperparameter from, in order: these options when the build set it, the
        deployment's settings, the base model's training defaults, this class's default."""
        values: dict[str, Any] = {}
        sources: dict[str, HyperparameterSource] = {}
        layers: list[tuple[HyperparameterSource, dict[str, Any]]] = [
            ("deployment", deployment.given() if deployment else {}),
            ("baseModel", base_model.given() if base_model else {}),
        ]
        for key in TRAINING_KEYS:
            source: HyperparameterSource = "buildOptions" if key in self.model_fields_set else "default"
            value = getattr(self, key)
            if source == "default":
                for layer, given in layers:
                    if key in given:
                        source, value = layer, given[key]
                        break
            values[key], sources[key] = value, source
        return TrainingHyperparameters(values=TrainingDefaults.model_validate(values), sources=sources)
