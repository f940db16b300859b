"""The build's typed record (`serval_api.db.models.build_record`) and the JSON column types that
store it: old camelCase rows load, values round-trip through SQLite, and a misspelt field is an
error where the record is built; and the one reader of both platforms' reported execution data."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import create_engine, insert, text
from sqlalchemy.orm import Session

from serval.translation.v1 import platform_pb2 as translation_pb2
from serval.word_alignment.v1 import platform_pb2 as word_alignment_pb2
from serval_api.db.models import Base, BuildRow, EngineRow
from serval_api.db.models.build_record import CorpusAnalysis, Diagnostic, ExecutionData, Phase
from serval_api.grpc.platform_api import execution_data_from
from serval_api.service import diagnostics

OLD_EXECUTION_DATA: dict[str, Any] = {
    "trainCount": 7,
    "pretranslateCount": 3,
    "warnings": ["short corpus"],
    "engineSourceLanguageTag": "en",
    "diagnostics": [
        {"code": "JOB-1001", "category": "JOB", "message": "short corpus", "severity": "Warn", "data": {}}
    ],
    "diagnosticsTruncated": False,
    "averagePretranslationConfidence": 0.5,
    "someFutureKey": {"kept": True},
}


def test_an_old_camel_case_row_loads_and_writes_back_unchanged() -> None:
    column = BuildRow.__table__.c.execution_data.type
    loaded = column.process_result_value(OLD_EXECUTION_DATA, None)
    assert isinstance(loaded, ExecutionData)
    assert loaded.train_count == 7 and loaded.engine_source_language_tag == "en"
    assert loaded.diagnostics == [diagnostics.job_warning("short corpus")]
    assert loaded.average_pretranslation_confidence == 0.5
    assert column.process_bind_param(loaded, None) == OLD_EXECUTION_DATA


def test_stored_warnings_of_none_read_as_none_reported() -> None:
    column = BuildRow.__table__.c.execution_data.type
    assert column.process_result_value({"trainCount": 7, "warnings": None}, None) == ExecutionData(
        train_count=7
    )


def test_a_misspelt_field_is_an_error_where_the_record_is_built() -> None:
    with pytest.raises(ValidationError, match="no field train_cont"):
        ExecutionData(train_cont=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="no field stepcount"):
        Phase(stage="Train", stepcount=3)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="no field average_confidence"):
        ExecutionData().updated(average_confidence=0.5)
    with pytest.raises(AttributeError):
        _ = ExecutionData().train_cont  # type: ignore[attr-defined]


def _engine(db: Session) -> None:
    db.add(
        EngineRow(
            id="e1",
            owner="o",
            type="echo",
            source_language="en",
            target_language="fr",
            source_code="eng_Latn",
            target_code="fra_Latn",
        )
    )


def test_the_columns_round_trip_through_sqlite(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'builds.db'}")
    Base.metadata.create_all(engine)
    started = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)
    data = diagnostics.with_fault(ExecutionData(train_count=2, warnings=["w"]), "out of memory")
    phases = [Phase(stage="Train", step=3, step_count=10, started=started), Phase(stage="Inference")]
    analysis = [
        CorpusAnalysis(
            parallel_corpus_ref="pc1", target_quote_convention="standard_english", can_denormalize_quotes=True
        )
    ]
    with Session(engine) as db:
        _engine(db)
        db.add(
            BuildRow(
                id="b1",
                engine_id="e1",
                owner="o",
                target_model_revision=1,
                execution_data=data,
                phases=phases,
                analysis=analysis,
            )
        )
        db.commit()
    with Session(engine) as db:
        build = db.get(BuildRow, "b1")
        assert build is not None
        assert build.execution_data == data
        assert build.phases == phases and build.phases[0].started == started
        assert build.analysis == analysis
        raw = db.execute(text("SELECT phases, analysis FROM builds")).one()
    assert json.loads(raw.phases) == [
        {"stage": "Train", "step": 3, "stepCount": 10, "started": "2024-05-06T07:08:09+00:00"},
        {"stage": "Inference"},
    ]
    assert json.loads(raw.analysis) == [
        {
            "parallelCorpusRef": "pc1",
            "targetQuoteConvention": "standard_english",
            "canDenormalizeQuotes": True,
        }
    ]


def test_old_rows_written_as_json_load_as_records(tmp_path: Path) -> None:
    """The JSON as the columns held it before the models, written past the column types."""
    engine = create_engine(f"sqlite:///{tmp_path / 'builds.db'}")
    Base.metadata.create_all(engine)
    with Session(engine) as db:
        _engine(db)
        db.commit()
        db.execute(
            insert(BuildRow.__table__).values(
                id="b1",
                engine_id="e1",
                owner="o",
                revision=1,
                state="Completed",
                step=0,
                target_model_revision=1,
                restarts=0,
                date_created=datetime.now(UTC),
            )
        )
        old = {
            "execution_data": OLD_EXECUTION_DATA,
            "phases": [{"stage": "Train", "step": 1, "stepCount": 4, "started": "2024-05-06T07:08:09+00:00"}],
            "analysis": [
                {"parallelCorpusRef": "pc1", "targetQuoteConvention": "", "canDenormalizeQuotes": False}
            ],
        }
        db.execute(
            text(
                "UPDATE builds SET execution_data = :execution_data, phases = :phases, analysis = :analysis"
            ),
            {name: json.dumps(value) for name, value in old.items()},
        )
        db.commit()
    with Session(engine) as db:
        build = db.get(BuildRow, "b1")
        assert build is not None and build.execution_data is not None and build.phases and build.analysis
        assert build.execution_data.pretranslate_count == 3
        assert build.phases[0].step_count == 4
        assert build.analysis[0].can_denormalize_quotes is False


def test_diagnostics_are_records() -> None:
    made = diagnostics.build_fault("gone")
    assert made == Diagnostic(code="BUILD-1001", category="BUILD", message="gone", severity="Error")
    assert made.model_dump(by_alias=True) == {
        "code": "BUILD-1001",
        "category": "BUILD",
        "message": "gone",
        "severity": "Error",
        "data": {},
    }


def test_both_platforms_execution_data_read_through_one_function() -> None:
    translation = execution_data_from(
        translation_pb2.ExecutionData(train_count=0, pretranslate_count=4, resolved_source_language="")
    )
    assert translation == ExecutionData(train_count=0, pretranslate_count=4)
    assert translation.model_fields_set == {"train_count", "pretranslate_count"}
    aligned = execution_data_from(word_alignment_pb2.ExecutionData(word_align_count=2, warnings=["w"]))
    assert aligned == ExecutionData(train_count=0, word_align_count=2, warnings=["w"])
