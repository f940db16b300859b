"""Serval's five engine types, declared once. A new family is a declaration here (or in a module
of its own that calls `register`) plus its build job and its node model class."""

from __future__ import annotations

from serval.inference.v1 import node_pb2
from serval_common import thot_alignment, thot_smt
from serval_common.alignment_build_options import AlignmentBuildOptions
from serval_common.build_options import NmtBuildOptions
from serval_common.families.family import (
    ALIGNMENT_OPERATIONS,
    TRANSLATION_OPERATIONS,
    EngineFamily,
    Kind,
)
from serval_common.families.registry import register
from serval_common.smt_build_options import SmtBuildOptions

CTRANSLATE2 = "ctranslate2"
"""The manifest backend of CTranslate2 conversions (NLLB-200 and its fine-tunes)."""

NMT = register(
    EngineFamily(
        name="nmt",
        kind=Kind.TRANSLATION,
        options=NmtBuildOptions,
        job="build_jobs.nmt.job:NmtBuildJob",
        backend=CTRANSLATE2,
        node_model="inference_gpu.families.nmt.model:NmtModel",
        wire=node_pb2.ENGINE_FAMILY_NMT,
        operations=TRANSLATION_OPERATIONS,
        pretranslates=True,
        takes_base_model=True,
        micro_builds=True,
    )
)
SMT_TRANSFER = register(
    EngineFamily(
        name="smt-transfer",
        kind=Kind.TRANSLATION,
        options=SmtBuildOptions,
        job="build_jobs.smt.build:SmtBuildJob",
        backend=thot_smt.BACKEND,
        node_model="inference_gpu.families.smt.model:SmtModel",
        wire=node_pb2.ENGINE_FAMILY_SMT_TRANSFER,
        operations=TRANSLATION_OPERATIONS,
        machine_source="SMT",
        learns=True,
        pretranslates=True,
        persisted_by_default=True,
    )
)
STATISTICAL = register(
    EngineFamily(
        name="statistical",
        kind=Kind.WORD_ALIGNMENT,
        options=AlignmentBuildOptions,
        job="build_jobs.alignment.job:AlignmentBuildJob",
        backend=thot_alignment.BACKEND,
        node_model="inference_gpu.families.alignment:AlignmentModel",
        wire=node_pb2.ENGINE_FAMILY_STATISTICAL,
        operations=ALIGNMENT_OPERATIONS,
    )
)
ECHO = register(
    EngineFamily(
        name="echo",
        kind=Kind.TRANSLATION,
        options=NmtBuildOptions,
        job=None,
        backend=None,
        operations=TRANSLATION_OPERATIONS,
        pretranslates=True,
    )
)
ECHO_WORD_ALIGNMENT = register(
    EngineFamily(
        name="echo-word-alignment",
        kind=Kind.WORD_ALIGNMENT,
        options=AlignmentBuildOptions,
        job=None,
        backend=None,
        operations=ALIGNMENT_OPERATIONS,
    )
)

DEFAULT_NODE_FAMILY = NMT
"""What a node that claims no family (an older node) serves."""
