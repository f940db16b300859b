"""How the work runner answers a family's failures: a typed failure (`WorkFailure`) with its own
`WorkError` code, anything else (a `ValueError` from the node's own code included) as an internal
error, never as the client's mistake."""

from __future__ import annotations

import asyncio
import logging
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self, cast

import pytest

from inference_gpu.families import (
    BadInput,
    Capability,
    InputTooLong,
    ModelUnavailable,
    ServedModel,
    Unsupported,
)
from inference_gpu.metrics import NodeMetrics
from inference_gpu.model_manager import ModelManager
from inference_gpu.work_runner import WorkRunner
from serval.inference.v1 import node_pb2
from serval_common.core import UNKNOWN_SENDER, Detail, Sender, TranslationResult
from serval_common.manifest import Manifest
from serval_common.settings import NodeSettings, Settings


class FailingModel(ServedModel):
    """A model whose translate raises the exception it is given."""

    family = "nmt"
    capabilities = frozenset({Capability.TRANSLATE})

    def __init__(self, failure: Exception) -> None:
        self.failure = failure

    @classmethod
    def load(
        cls,
        folder: Path,
        manifest: Manifest,
        node_settings: NodeSettings,
        *,
        on_batch: Callable[[int], None] | None = None,
    ) -> Self:
        raise NotImplementedError("the test makes its models directly")

    @property
    def size_bytes(self) -> int:
        return 0

    @property
    def pending(self) -> int:
        return 0

    async def translate(
        self,
        segment: str,
        n: int,
        source_code: str,
        target_code: str,
        prefix: str = "",
        *,
        engine_id: str = "",
        detail: Detail = Detail.FULL,
        sender: Sender = UNKNOWN_SENDER,
    ) -> list[TranslationResult]:
        raise self.failure

    async def close(self, *, drain: bool = True) -> None:
        return None


class OneModel:
    """The model manager's `get`, always answering with one model."""

    def __init__(self, model: ServedModel) -> None:
        self.model = model

    async def get(self, ref: node_pb2.ModelRef) -> ServedModel:
        return self.model


def answer(failure: Exception, tmp_path: Path) -> node_pb2.WorkError:
    models = cast(ModelManager, OneModel(FailingModel(failure)))
    runner = WorkRunner(Settings(home=tmp_path), models, NodeMetrics(), lambda: False)
    item = node_pb2.WorkItem(
        request_id="r1",
        model=node_pb2.ModelRef(engine_id="e1", revision=1, location="models/e1/1"),
        translate=node_pb2.TranslateOp(
            segment="hello", n=1, source_language="eng_Latn", target_language="swh_Latn"
        ),
    )
    result = asyncio.run(runner.execute(item))
    assert result.WhichOneof("outcome") == "error"
    return result.error


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (BadInput("the segment is empty"), node_pb2.WORK_ERROR_CODE_INVALID_ARGUMENT),
        (
            InputTooLong("the segment has 41 tokens; at most 40 are accepted"),
            node_pb2.WORK_ERROR_CODE_INVALID_ARGUMENT,
        ),
        (ModelUnavailable("unknown backend 'x'"), node_pb2.WORK_ERROR_CODE_MODEL_UNAVAILABLE),
        (Unsupported("statistical", Capability.TRANSLATE), node_pb2.WORK_ERROR_CODE_UNIMPLEMENTED),
    ],
)
def test_a_typed_failure_keeps_its_code_and_message(failure: Exception, code: int, tmp_path: Path) -> None:
    error = answer(failure, tmp_path)
    assert (error.code, error.message) == (code, str(failure))


def test_an_unexpected_value_error_is_an_internal_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="inference_gpu.node"):
        error = answer(ValueError("a bug in the node: index 7 out of range"), tmp_path)
    assert error.code == node_pb2.WORK_ERROR_CODE_INTERNAL
    assert "index 7" not in error.message and "error id" in error.message
    causes = [record.exc_info[1] for record in caplog.records if record.exc_info]
    assert [str(cause) for cause in causes] == ["a bug in the node: index 7 out of range"], (
        "logged with its traceback"
    )


def test_a_failure_crosses_the_smt_worker_process_typed() -> None:
    """The smt-transfer family raises them in its worker process: they come back pickled."""
    failure: Any = pickle.loads(pickle.dumps(InputTooLong("the segment has 9 words; at most 8 are accepted")))
    assert isinstance(failure, InputTooLong) and failure.code == node_pb2.WORK_ERROR_CODE_INVALID_ARGUMENT
    assert str(failure) == "the segment has 9 words; at most 8 are accepted"
