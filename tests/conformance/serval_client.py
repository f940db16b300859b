"""What SIL's generated `Serval.Client` expects of a server, as data, for the two releases a
server must satisfy: the client of Serval's last gRPC release (`OLDER`: 70 operations, 53
translation and shared ones, 17 `WordAlignment*` ones) and `Serval.Client` 1.20 (`NEWER`: 71, the
older ones without the four `Webhooks` operations, with the four `ApiKeys` operations and
`GetAllPretranslationConfidences`); the shapes each deserializes and the enums.

Transcribed by hand from docs/serval-client.md of the shared workspace (read from
`src/Serval/src/Serval.Client/Client.g.cs` at Serval's last gRPC release and at Serval main
e4c5c1ea, its section "1.20"). Shapes keep that document's notation, one line per shape, so each
line can be compared with it by eye: `**name**` is `Required.Always` (present and non-null), a
trailing `?` marks a nullable type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

BASE_PATH = "/api/v1"


@dataclass(frozen=True)
class Operation:
    client: str
    name: str
    verb: str
    path: str
    """Under /api/v1/, with the client's `{parameter}` names."""
    query: tuple[str, ...]
    success: tuple[int, ...]
    response: str | None
    """A shape name, `Shape[]`, `FileResponse`, or None where the client reads no body."""
    errors: tuple[int, ...]

    @property
    def key(self) -> str:
        return f"{self.client}.{self.name}"


def _op(
    client: str,
    name: str,
    verb: str,
    path: str,
    success: str,
    errors: str = "",
    query: str = "",
) -> Operation:
    """`success` as the document writes it: `200 → TranslationBuild`, `201 → Corpus`, `200 → —`,
    or several statuses `206, 200 → FileResponse`."""
    statuses, _, response = success.partition(" → ")
    return Operation(
        client=client,
        name=name,
        verb=verb,
        path=path,
        query=tuple(q.strip() for q in query.split(",") if q.strip()),
        success=tuple(int(s) for s in statuses.split(",")),
        response=None if response == "—" else response,
        errors=tuple(int(e) for e in errors.split()),
    )


_USFM_QUERY = (
    "text-origin, template, paragraph-marker-behavior, embed-behavior, style-marker-behavior, "
    "quotation-mark-behavior"
)
_E = "TranslationEngines"
_W = "WordAlignmentEngines"

OPERATIONS: tuple[Operation, ...] = (
    _op("Status", "GetHealth", "GET", "status/health", "200 → HealthReport", "401 403"),
    _op("Status", "GetPing", "GET", "status/ping", "200 → HealthReport"),
    _op("Status", "GetDeploymentInfo", "GET", "status/deployment-info", "200 → DeploymentInfo"),
    _op("Corpora", "GetAll", "GET", "corpora", "200 → Corpus[]", "401 403 503"),
    _op("Corpora", "Create", "POST", "corpora", "201 → Corpus", "400 401 403 503"),
    _op("Corpora", "Get", "GET", "corpora/{id}", "200 → Corpus", "401 403 404 503"),
    _op("Corpora", "Update", "PATCH", "corpora/{id}", "200 → Corpus", "400 401 403 404 503"),
    _op("Corpora", "Delete", "DELETE", "corpora/{id}", "200 → —", "401 403 404 503"),
    _op("DataFiles", "GetAll", "GET", "files", "200 → DataFile[]", "401 403 503"),
    _op("DataFiles", "Create", "POST", "files", "201 → DataFile", "400 401 403 503"),
    _op("DataFiles", "Get", "GET", "files/{id}", "200 → DataFile", "401 403 404 503"),
    _op("DataFiles", "Update", "PATCH", "files/{id}", "200 → DataFile", "400 401 403 404 503"),
    _op("DataFiles", "Delete", "DELETE", "files/{id}", "200 → —", "401 403 404 503"),
    _op(
        "DataFiles",
        "Download",
        "POST",
        "files/{id}/contents",
        "206, 200 → FileResponse",
        "401 403 404 500 503",
    ),
    _op(
        "TranslationBuilds",
        "GetAllBuildsCreatedAfter",
        "GET",
        "translation/builds",
        "200 → TranslationBuild[]",
        "401 403 503",
        "created-after",
    ),
    _op(
        "TranslationBuilds",
        "GetNextFinishedBuild",
        "GET",
        "translation/builds/next-finished",
        "200 → TranslationBuild",
        "401 403 408 503",
        "finished-after",
    ),
    _op(_E, "GetAll", "GET", "translation/engines", "200 → TranslationEngine[]", "401 403 503"),
    _op(_E, "Create", "POST", "translation/engines", "201 → TranslationEngine", "400 401 403 503"),
    _op(_E, "Get", "GET", "translation/engines/{id}", "200 → TranslationEngine", "401 403 404 503"),
    _op(_E, "Delete", "DELETE", "translation/engines/{id}", "200 → —", "401 403 404 503"),
    _op(_E, "Update", "PATCH", "translation/engines/{id}", "200 → —", "401 403 404 503"),
    _op(
        _E,
        "Translate",
        "POST",
        "translation/engines/{id}/translate",
        "200 → TranslationResult",
        "400 401 403 404 405 409 503",
    ),
    _op(
        _E,
        "TranslateN",
        "POST",
        "translation/engines/{id}/translate/{n}",
        "200 → TranslationResult[]",
        "400 401 403 404 405 409 503",
    ),
    _op(
        _E,
        "GetWordGraph",
        "POST",
        "translation/engines/{id}/get-word-graph",
        "200 → WordGraph",
        "400 401 403 404 405 409 503",
    ),
    _op(
        _E,
        "TrainSegment",
        "POST",
        "translation/engines/{id}/train-segment",
        "200 → —",
        "400 401 403 404 405 409 503",
    ),
    _op(
        _E,
        "AddCorpus",
        "POST",
        "translation/engines/{id}/corpora",
        "201 → TranslationCorpus",
        "400 401 403 404 503",
    ),
    _op(
        _E,
        "GetAllCorpora",
        "GET",
        "translation/engines/{id}/corpora",
        "200 → TranslationCorpus[]",
        "401 403 404 503",
    ),
    _op(
        _E,
        "UpdateCorpus",
        "PATCH",
        "translation/engines/{id}/corpora/{corpusId}",
        "200 → TranslationCorpus",
        "400 401 403 404 503",
    ),
    _op(
        _E,
        "GetCorpus",
        "GET",
        "translation/engines/{id}/corpora/{corpusId}",
        "200 → TranslationCorpus",
        "401 403 404 503",
    ),
    _op(
        _E,
        "DeleteCorpus",
        "DELETE",
        "translation/engines/{id}/corpora/{corpusId}",
        "200 → —",
        "401 403 404 503",
        "delete-files",
    ),
    _op(
        _E,
        "GetAllCorpusPretranslations",
        "GET",
        "translation/engines/{id}/corpora/{corpusId}/pretranslations",
        "200 → Pretranslation[]",
        "401 403 404 409 503",
        "text-id",
    ),
    _op(
        _E,
        "GetCorpusPretranslationsByTextId",
        "GET",
        "translation/engines/{id}/corpora/{corpusId}/pretranslations/{textId}",
        "200 → Pretranslation[]",
        "401 403 404 409 503",
    ),
    _op(
        _E,
        "GetCorpusPretranslatedUsfm",
        "GET",
        "translation/engines/{id}/corpora/{corpusId}/pretranslations/{textId}/usfm",
        "200 → —",
        "204 400 401 403 404 409 503",
        _USFM_QUERY,
    ),
    _op(
        _E,
        "AddParallelCorpus",
        "POST",
        "translation/engines/{id}/parallel-corpora",
        "201 → TranslationParallelCorpus",
        "400 401 403 404 503",
    ),
    _op(
        _E,
        "GetAllParallelCorpora",
        "GET",
        "translation/engines/{id}/parallel-corpora",
        "200 → TranslationParallelCorpus[]",
        "401 403 404 503",
    ),
    _op(
        _E,
        "UpdateParallelCorpus",
        "PATCH",
        "translation/engines/{id}/parallel-corpora/{parallelCorpusId}",
        "200 → TranslationParallelCorpus",
        "400 401 403 404 503",
    ),
    _op(
        _E,
        "GetParallelCorpus",
        "GET",
        "translation/engines/{id}/parallel-corpora/{parallelCorpusId}",
        "200 → TranslationParallelCorpus",
        "401 403 404 503",
    ),
    _op(
        _E,
        "DeleteParallelCorpus",
        "DELETE",
        "translation/engines/{id}/parallel-corpora/{parallelCorpusId}",
        "200 → —",
        "401 403 404 503",
    ),
    _op(
        _E,
        "GetAllPretranslations",
        "GET",
        "translation/engines/{id}/parallel-corpora/{parallelCorpusId}/pretranslations",
        "200 → Pretranslation[]",
        "401 403 404 409 503",
        "text-id",
    ),
    _op(
        _E,
        "GetPretranslationsByTextId",
        "GET",
        "translation/engines/{id}/parallel-corpora/{parallelCorpusId}/pretranslations/{textId}",
        "200 → Pretranslation[]",
        "401 403 404 409 503",
    ),
    _op(
        _E,
        "GetPretranslatedUsfm",
        "GET",
        "translation/engines/{id}/parallel-corpora/{parallelCorpusId}/pretranslations/{textId}/usfm",
        "200 → —",
        "204 400 401 403 404 409 503",
        _USFM_QUERY,
    ),
    _op(
        _E,
        "GetAllBuilds",
        "GET",
        "translation/engines/{id}/builds",
        "200 → TranslationBuild[]",
        "401 403 404 503",
    ),
    _op(
        _E,
        "StartBuild",
        "POST",
        "translation/engines/{id}/builds",
        "201 → TranslationBuild",
        "400 401 403 404 409 503",
    ),
    _op(
        _E,
        "GetBuild",
        "GET",
        "translation/engines/{id}/builds/{buildId}",
        "200 → TranslationBuild",
        "401 403 404 408 503",
        "min-revision",
    ),
    _op(
        _E,
        "GetCurrentBuild",
        "GET",
        "translation/engines/{id}/current-build",
        "200 → TranslationBuild",
        "204 400 401 403 404 408 503",
        "min-revision",
    ),
    _op(
        _E,
        "CancelBuild",
        "POST",
        "translation/engines/{id}/current-build/cancel",
        "200 → TranslationBuild",
        "204 401 403 404 405 503",
    ),
    _op(
        _E,
        "GetModelDownloadUrl",
        "GET",
        "translation/engines/{id}/model-download-url",
        "200 → ModelDownloadUrl",
        "401 403 404 405 503",
    ),
    _op(
        "TranslationEngineTypes",
        "GetQueue",
        "GET",
        "translation/engine-types/{engineType}/queues",
        "200 → Queue",
        "401 403 503",
    ),
    _op(
        "TranslationEngineTypes",
        "GetLanguageInfo",
        "GET",
        "translation/engine-types/{engineType}/languages/{language}",
        "200 → LanguageInfo",
        "401 403 405",
    ),
    _op("Webhooks", "GetAll", "GET", "hooks", "200 → Webhook[]", "503"),
    _op("Webhooks", "Create", "POST", "hooks", "201 → Webhook", "503"),
    _op("Webhooks", "Get", "GET", "hooks/{id}", "200 → Webhook", "403 404 503"),
    _op("Webhooks", "Delete", "DELETE", "hooks/{id}", "200 → —", "403 404 503"),
    _op(_W, "GetAll", "GET", "word-alignment/engines", "200 → WordAlignmentEngine[]", "401 403 503"),
    _op(_W, "Create", "POST", "word-alignment/engines", "201 → WordAlignmentEngine", "400 401 403 503"),
    _op(_W, "Get", "GET", "word-alignment/engines/{id}", "200 → WordAlignmentEngine", "401 403 404 503"),
    _op(_W, "Delete", "DELETE", "word-alignment/engines/{id}", "200 → —", "401 403 404 503"),
    _op(
        _W,
        "Align",
        "POST",
        "word-alignment/engines/{id}/align",
        "200 → WordAlignmentResult",
        "400 401 403 404 405 409 503",
    ),
    _op(
        _W,
        "AddParallelCorpus",
        "POST",
        "word-alignment/engines/{id}/parallel-corpora",
        "201 → WordAlignmentParallelCorpus",
        "400 401 403 404 503",
    ),
    _op(
        _W,
        "GetAllParallelCorpora",
        "GET",
        "word-alignment/engines/{id}/parallel-corpora",
        "200 → WordAlignmentParallelCorpus[]",
        "401 403 404 503",
    ),
    _op(
        _W,
        "UpdateParallelCorpus",
        "PATCH",
        "word-alignment/engines/{id}/parallel-corpora/{parallelCorpusId}",
        "200 → WordAlignmentParallelCorpus",
        "400 401 403 404 503",
    ),
    _op(
        _W,
        "GetParallelCorpus",
        "GET",
        "word-alignment/engines/{id}/parallel-corpora/{parallelCorpusId}",
        "200 → WordAlignmentParallelCorpus",
        "401 403 404 503",
    ),
    _op(
        _W,
        "DeleteParallelCorpus",
        "DELETE",
        "word-alignment/engines/{id}/parallel-corpora/{parallelCorpusId}",
        "200 → —",
        "401 403 404 503",
    ),
    _op(
        _W,
        "GetAllWordAlignments",
        "GET",
        "word-alignment/engines/{id}/corpora/{corpusId}/word-alignments",
        "200 → WordAlignment[]",
        "401 403 404 409 503",
        "text-id",
    ),
    _op(
        _W,
        "GetAllBuilds",
        "GET",
        "word-alignment/engines/{id}/builds",
        "200 → WordAlignmentBuild[]",
        "401 403 404 503",
    ),
    _op(
        _W,
        "StartBuild",
        "POST",
        "word-alignment/engines/{id}/builds",
        "201 → WordAlignmentBuild",
        "400 401 403 404 409 503",
    ),
    _op(
        _W,
        "GetBuild",
        "GET",
        "word-alignment/engines/{id}/builds/{buildId}",
        "200 → WordAlignmentBuild",
        "401 403 404 408 503",
        "min-revision",
    ),
    _op(
        _W,
        "GetCurrentBuild",
        "GET",
        "word-alignment/engines/{id}/current-build",
        "200 → WordAlignmentBuild",
        "204 400 401 403 404 408 503",
        "min-revision",
    ),
    _op(
        _W,
        "CancelBuild",
        "POST",
        "word-alignment/engines/{id}/current-build/cancel",
        "200 → WordAlignmentBuild",
        "204 401 403 404 405 503",
    ),
    _op(
        "WordAlignmentEngineTypes",
        "GetQueue",
        "GET",
        "word-alignment/engine-types/{engineType}/queues",
        "200 → Queue",
        "401 403 503",
    ),
)

OPERATIONS_BY_KEY: dict[str, Operation] = {op.key: op for op in OPERATIONS}

WORD_ALIGNMENT_OPERATIONS = frozenset(op.key for op in OPERATIONS if op.client.startswith("WordAlignment"))
"""The 17 operations a word-alignment (`statistical`) engine's walk calls (the same in 1.20)."""
TRANSLATION_OPERATIONS = frozenset(OPERATIONS_BY_KEY) - WORD_ALIGNMENT_OPERATIONS
"""The 53 operations a translation engine's walk calls."""

OLDER = "gRPC release"
"""The client of Serval's last gRPC release (spring 2026)."""
NEWER = "1.20"
"""`Serval.Client` 1.20 (Serval main e4c5c1ea, 2026-08)."""
RELEASES = (OLDER, NEWER)

OPERATIONS_1_20: tuple[Operation, ...] = (
    *(op for op in OPERATIONS if op.client != "Webhooks"),
    _op("ApiKeys", "Create", "POST", "api-keys", "201 → ApiKeyCreated", "400 503"),
    _op("ApiKeys", "GetAll", "GET", "api-keys", "200 → ApiKey[]", "503", "clientId"),
    _op("ApiKeys", "Get", "GET", "api-keys/{id}", "200 → ApiKey", "404 503"),
    _op("ApiKeys", "Delete", "DELETE", "api-keys/{id}", "200 → —", "404 503"),
    _op(
        _E,
        "GetAllPretranslationConfidences",
        "GET",
        "translation/engines/{id}/parallel-corpora/{parallelCorpusId}/confidences",
        "200 → PretranslationConfidence[]",
        "401 403 404 409 503",
    ),
)
"""1.20's 71: the older client's less the four `Webhooks` operations (Serval removed webhooks for
the `next-finished` long poll), plus the five it adds."""

OPERATIONS_OF: dict[str, tuple[Operation, ...]] = {OLDER: OPERATIONS, NEWER: OPERATIONS_1_20}
OPERATIONS_BY_KEY_OF: dict[str, dict[str, Operation]] = {
    release: {op.key: op for op in operations} for release, operations in OPERATIONS_OF.items()
}
TRANSLATION_OPERATIONS_OF: dict[str, frozenset[str]] = {
    release: frozenset(by_key) - WORD_ALIGNMENT_OPERATIONS for release, by_key in OPERATIONS_BY_KEY_OF.items()
}
"""Per release, the operations a translation engine's walk calls (53 of the older client, 54 of 1.20)."""


@dataclass(frozen=True)
class Expectation:
    """What an engine type answers instead of an operation's success status, in Serval itself."""

    statuses: tuple[int, ...]
    reason: str


ENGINE_TYPES = ("echo", "nmt", "smt-transfer", "statistical")

ENGINE_EXPECTATIONS: dict[tuple[str, str], Expectation] = {
    ("echo", f"{_E}.GetCurrentBuild"): Expectation(
        (200, 204),
        "an echo build runs for a moment (Pending → Active → Completed, as Serval's echo build jobs "
        "do): current while it runs (200), then 204, which the client maps to 'no build running'",
    ),
    ("echo", f"{_E}.CancelBuild"): Expectation(
        (200, 204),
        "the echo build the walk starts may have ended by the time it is canceled: 200 with the "
        "canceled build while it runs, else 204, which the client maps to 'no build running'",
    ),
}


def expected_statuses(engine_type: str, operation: Operation) -> tuple[int, ...]:
    expectation = ENGINE_EXPECTATIONS.get((engine_type, operation.key))
    return expectation.statuses if expectation else operation.success


SHAPES_TEXT = """
- `AlignedWordPair`: **sourceIndex**: int; **targetIndex**: int; score: double?
- `Corpus`: **id**: string; **revision**: int; **language**: string; name: string?; **url**: string; **files**: IList<CorpusFile>
- `CorpusConfig`: name: string?; **language**: string; **files**: IList<CorpusFileConfig>
- `CorpusFile`: **file**: ResourceLink; textId: string?
- `CorpusFileConfig`: **fileId**: string; textId: string?
- `DataFile`: **id**: string; **url**: string; name: string?; **format**: FileFormat; **revision**: int
- `DeploymentInfo`: **deploymentVersion**: string; **aspNetCoreEnvironment**: string
- `ExecutionData`: **trainCount**: int; **pretranslateCount**: int; **warnings**: IList<string>; engineSourceLanguageTag: string?; engineTargetLanguageTag: string?; resolvedSourceLanguage: string?; resolvedTargetLanguage: string?
- `HealthReport`: **status**: string; **totalDuration**: string; **results**: IDictionary<string, HealthReportEntry>
- `HealthReportEntry`: **status**: string; **duration**: string; description: string?; exception: string?; data: IDictionary<string, string>?
- `LanguageInfo`: **engineType**: string; **isNative**: bool; internalCode: string?
- `ModelDownloadUrl`: **url**: string; **modelRevision**: int; **expiresAt**: DateTimeOffset
- `ParallelCorpusAnalysis`: **parallelCorpusRef**: string; sourceQuoteConvention: string?; **targetQuoteConvention**: string; **canDenormalizeQuotes**: bool
- `ParallelCorpusFilter`: **corpus**: ResourceLink; textIds: IList<string>?; scriptureRange: string?
- `ParallelCorpusFilterConfig`: **corpusId**: string; textIds: IList<string>?; scriptureRange: string?
- `Phase`: **stage**: PhaseStage; step: int?; stepCount: int?; started: DateTimeOffset?
- `Phrase`: **sourceSegmentStart**: int; **sourceSegmentEnd**: int; **targetSegmentCut**: int
- `PretranslateCorpus`: corpus: ResourceLink?; textIds: IList<string>?; scriptureRange: string?; parallelCorpus: ResourceLink?; sourceFilters: IList<ParallelCorpusFilter>?
- `PretranslateCorpusConfig`: corpusId: string?; textIds: IList<string>?; scriptureRange: string?; parallelCorpusId: string?; sourceFilters: IList<ParallelCorpusFilterConfig>?
- `Pretranslation`: **textId**: string; **sourceRefs**: IList<string>; **targetRefs**: IList<string>; refs: IList<string>?; **translation**: string; **confidence**: double
- `Queue`: **size**: int; **engineType**: string
- `ResourceLink`: **id**: string; **url**: string
- `SegmentPair`: **sourceSegment**: string; **targetSegment**: string; **sentenceStart**: bool
- `TrainingCorpus`: corpus: ResourceLink?; textIds: IList<string>?; scriptureRange: string?; parallelCorpus: ResourceLink?; sourceFilters: IList<ParallelCorpusFilter>?; targetFilters: IList<ParallelCorpusFilter>?
- `TrainingCorpusConfig`: corpusId: string?; textIds: IList<string>?; scriptureRange: string?; parallelCorpusId: string?; sourceFilters: IList<ParallelCorpusFilterConfig>?; targetFilters: IList<ParallelCorpusFilterConfig>?
- `TranslationBuild`: **id**: string; **url**: string; **revision**: int; name: string?; **engine**: ResourceLink; trainOn: IList<TrainingCorpus>?; pretranslate: IList<PretranslateCorpus>?; **step**: int; percentCompleted: double?; progress: double?; message: string?; queueDepth: int?; **state**: JobState; dateCreated: DateTimeOffset?; dateStarted: DateTimeOffset?; dateCompleted: DateTimeOffset?; dateFinished: DateTimeOffset?; options: object?; deploymentVersion: string?; **executionData**: ExecutionData; phases: IList<Phase>?; analysis: IList<ParallelCorpusAnalysis>?; targetQuoteConvention: string?; **canDenormalizeQuotes**: bool
- `TranslationBuildConfig`: name: string?; trainOn: IList<TrainingCorpusConfig>?; pretranslate: IList<PretranslateCorpusConfig>?; options: object?
- `TranslationCorpus`: **id**: string; **url**: string; **engine**: ResourceLink; name: string?; **sourceLanguage**: string; **targetLanguage**: string; **sourceFiles**: IList<TranslationCorpusFile>; **targetFiles**: IList<TranslationCorpusFile>
- `TranslationCorpusConfig`: name: string?; **sourceLanguage**: string; **targetLanguage**: string; **sourceFiles**: IList<TranslationCorpusFileConfig>; **targetFiles**: IList<TranslationCorpusFileConfig>
- `TranslationCorpusFile`: **file**: ResourceLink; textId: string?
- `TranslationCorpusFileConfig`: **fileId**: string; textId: string?
- `TranslationCorpusUpdateConfig`: sourceFiles: IList<TranslationCorpusFileConfig>?; targetFiles: IList<TranslationCorpusFileConfig>?
- `TranslationEngine`: **id**: string; **url**: string; name: string?; **sourceLanguage**: string; **targetLanguage**: string; **type**: string; isModelPersisted: bool?; **isBuilding**: bool; **modelRevision**: int; **confidence**: double; **corpusSize**: int; dateCreated: DateTimeOffset?
- `TranslationEngineConfig`: name: string?; **sourceLanguage**: string; **targetLanguage**: string; **type**: string; isModelPersisted: bool?
- `TranslationEngineUpdateConfig`: sourceLanguage: string?; targetLanguage: string?
- `TranslationParallelCorpus`: **id**: string; **url**: string; **engine**: ResourceLink; **sourceCorpora**: IList<ResourceLink>; **targetCorpora**: IList<ResourceLink>
- `TranslationParallelCorpusConfig`: name: string?; **sourceCorpusIds**: IList<string>; **targetCorpusIds**: IList<string>
- `TranslationParallelCorpusUpdateConfig`: sourceCorpusIds: IList<string>?; targetCorpusIds: IList<string>?
- `TranslationResult`: **translation**: string; **sourceTokens**: IList<string>; **targetTokens**: IList<string>; **confidences**: IList<double>; **sources**: IList<IList<TranslationSource>>; **alignment**: IList<AlignedWordPair>; **phrases**: IList<Phrase>
- `Webhook`: **id**: string; **url**: string; **payloadUrl**: string; **events**: IList<WebhookEvent>
- `WebhookConfig`: **payloadUrl**: string; **secret**: string; **events**: IList<WebhookEvent>
- `WordAlignment`: **textId**: string; **sourceRefs**: IList<string>; **targetRefs**: IList<string>; refs: IList<string>?; **sourceTokens**: IList<string>; **targetTokens**: IList<string>; **alignment**: IList<AlignedWordPair>
- `WordAlignmentBuild`: **id**: string; **url**: string; **revision**: int; name: string?; **engine**: ResourceLink; trainOn: IList<TrainingCorpus>?; wordAlignOn: IList<WordAlignmentCorpus>?; **step**: int; percentCompleted: double?; progress: double?; message: string?; queueDepth: int?; **state**: JobState; dateCreated: DateTimeOffset?; dateStarted: DateTimeOffset?; dateCompleted: DateTimeOffset?; dateFinished: DateTimeOffset?; options: object?; deploymentVersion: string?; **executionData**: WordAlignmentExecutionData; phases: IList<Phase>?
- `WordAlignmentBuildConfig`: name: string?; trainOn: IList<TrainingCorpusConfig>?; wordAlignOn: IList<WordAlignmentCorpusConfig>?; options: object?
- `WordAlignmentCorpus`: parallelCorpus: ResourceLink?; sourceFilters: IList<ParallelCorpusFilter>?; targetFilters: IList<ParallelCorpusFilter>?
- `WordAlignmentCorpusConfig`: parallelCorpusId: string?; sourceFilters: IList<ParallelCorpusFilterConfig>?; targetFilters: IList<ParallelCorpusFilterConfig>?
- `WordAlignmentEngine`: **id**: string; **url**: string; name: string?; **sourceLanguage**: string; **targetLanguage**: string; **type**: string; **isBuilding**: bool; **modelRevision**: int; **confidence**: double; **corpusSize**: int; dateCreated: DateTimeOffset?
- `WordAlignmentEngineConfig`: name: string?; **sourceLanguage**: string; **targetLanguage**: string; **type**: string
- `WordAlignmentExecutionData`: **trainCount**: int; **wordAlignCount**: int; **warnings**: IList<string>; engineSourceLanguageTag: string?; engineTargetLanguageTag: string?
- `WordAlignmentParallelCorpus`: **id**: string; **url**: string; **engine**: ResourceLink; **sourceCorpora**: IList<ResourceLink>; **targetCorpora**: IList<ResourceLink>
- `WordAlignmentParallelCorpusConfig`: name: string?; **sourceCorpusIds**: IList<string>; **targetCorpusIds**: IList<string>
- `WordAlignmentParallelCorpusUpdateConfig`: sourceCorpusIds: IList<string>?; targetCorpusIds: IList<string>?
- `WordAlignmentRequest`: **sourceSegment**: string; **targetSegment**: string
- `WordAlignmentResult`: **sourceTokens**: IList<string>; **targetTokens**: IList<string>; **alignment**: IList<AlignedWordPair>
- `WordGraph`: **sourceTokens**: IList<string>; **initialStateScore**: float; **finalStates**: IList<int>; **arcs**: IList<WordGraphArc>
- `WordGraphArc`: **prevState**: int; **nextState**: int; **score**: double; **targetTokens**: IList<string>; **confidences**: IList<double>; **sourceSegmentStart**: int; **sourceSegmentEnd**: int; **alignment**: IList<AlignedWordPair>; **sources**: IList<IList<TranslationSource>>
"""
"""The shapes the older client's 70 operations send and read."""

SHAPES_1_20_TEXT = """
- `ApiKey`: **id**: string; **url**: string; **clientId**: string; **name**: string; **scopes**: IList<string>; expiresAt: DateTimeOffset?; **createdAt**: DateTimeOffset; revokedAt: DateTimeOffset?
- `ApiKeyCreated`: **id**: string; **url**: string; **clientId**: string; **name**: string; **scopes**: IList<string>; expiresAt: DateTimeOffset?; **createdAt**: DateTimeOffset; revokedAt: DateTimeOffset?; **key**: string
- `ApiKeyConfig`: **clientId**: string; **name**: string; **scopes**: IList<string>; expiresAt: DateTimeOffset?
- `PretranslationConfidence`: **sourceRefs**: IList<string>; **targetRefs**: IList<string>; **confidence**: double
- `Diagnostic`: **code**: string; **category**: string; **message**: string; **severity**: DiagnosticSeverity; **data**: IDictionary<string, object>
- `ExecutionData`: **trainCount**: int; **pretranslateCount**: int; **warnings**: IList<string>; engineSourceLanguageTag: string?; engineTargetLanguageTag: string?; resolvedSourceLanguage: string?; resolvedTargetLanguage: string?; isTrainFilteredByChapter: bool?; isPretranslateFilteredByChapter: bool?; trainVerseCount: IDictionary<string, IDictionary<string, int>>?; pretranslateVerseCount: IDictionary<string, IDictionary<string, int>>?; diagnostics: IList<Diagnostic>?; diagnosticsTruncated: bool?; averagePretranslationConfidence: double?
- `WordAlignmentExecutionData`: **trainCount**: int; **wordAlignCount**: int; **warnings**: IList<string>; engineSourceLanguageTag: string?; engineTargetLanguageTag: string?; isTrainFilteredByChapter: bool?; isWordAlignFilteredByChapter: bool?; trainVerseCount: IDictionary<string, IDictionary<string, int>>?; wordAlignVerseCount: IDictionary<string, IDictionary<string, int>>?; diagnostics: IList<Diagnostic>?; diagnosticsTruncated: bool?
- `TranslationBuildConfig`: name: string?; trainOn: IList<TrainingCorpusConfig>?; pretranslate: IList<PretranslateCorpusConfig>?; options: object?; model: string?
- `WordAlignmentEngineConfig`: name: string?; **sourceLanguage**: string; **targetLanguage**: string; **type**: string; isModelPersisted: bool?
"""
"""1.20's new and changed shapes; the rest are the older client's (less `Webhook` and
`WebhookConfig`, whose operations 1.20 dropped)."""
DROPPED_IN_1_20 = ("Webhook", "WebhookConfig")

ENUMS: dict[str, tuple[str, ...]] = {
    "FileFormat": ("Text", "Paratext"),
    "JobState": ("Pending", "Active", "Completed", "Faulted", "Canceled"),
    "PhaseStage": ("Train", "Inference"),
    "PretranslationNormalizationBehavior": ("Normalized", "Denormalized"),
    "PretranslationUsfmMarkerBehavior": ("Preserve", "PreservePosition", "Strip"),
    "PretranslationUsfmTemplate": ("Auto", "Source", "Target"),
    "PretranslationUsfmTextOrigin": (
        "PreferExisting",
        "PreferPretranslated",
        "OnlyExisting",
        "OnlyPretranslated",
    ),
    "TranslationSource": ("Primary", "Secondary", "Human"),
    "WebhookEvent": (
        "TranslationBuildStarted",
        "TranslationBuildFinished",
        "WordAlignmentBuildStarted",
        "WordAlignmentBuildFinished",
    ),
}

ENUMS_1_20: dict[str, tuple[str, ...]] = {
    **{name: values for name, values in ENUMS.items() if name != "WebhookEvent"},
    "DiagnosticSeverity": ("Info", "Warn", "Error"),
}
"""1.20 adds `DiagnosticSeverity`; `WebhookEvent` is gone."""
ENUMS_OF: dict[str, dict[str, tuple[str, ...]]] = {OLDER: ENUMS, NEWER: ENUMS_1_20}

SCALARS = frozenset({"string", "int", "double", "float", "bool", "DateTimeOffset", "object"})
VALUE_TYPES = frozenset({"int", "double", "float", "bool", "DateTimeOffset"} | set(ENUMS) | set(ENUMS_1_20))
"""C# value types: never null unless written with `?`, required or not."""


@dataclass(frozen=True)
class Property:
    name: str
    type: str
    """`string`, `int`, `double`, `float`, `bool`, `DateTimeOffset`, `object`, an enum or shape
    name, `IList<T>` or `IDictionary<string, T>`."""
    required: bool
    nullable: bool

    @property
    def may_be_null(self) -> bool:
        """Whether Newtonsoft reads a JSON null here without throwing."""
        if self.required:
            return False
        return self.nullable or self.type not in VALUE_TYPES


_SHAPE_LINE = re.compile(r"^- `(\w+)`: (.+)$")
_PROPERTY = re.compile(r"^(\*\*)?(\w+)(?:\*\*)?: (.+?)(\?)?$")


@cache
def shapes(release: str = OLDER) -> dict[str, tuple[Property, ...]]:
    """The shapes of `release` by name."""
    if release == OLDER:
        return _parse(SHAPES_TEXT)
    if release != NEWER:
        raise KeyError(f"no client release {release!r}")
    older = {name: props for name, props in _parse(SHAPES_TEXT).items() if name not in DROPPED_IN_1_20}
    return {**older, **_parse(SHAPES_1_20_TEXT)}


def _parse(text: str) -> dict[str, tuple[Property, ...]]:
    parsed: dict[str, tuple[Property, ...]] = {}
    for line in text.strip().splitlines():
        shape = _SHAPE_LINE.match(line)
        if shape is None:
            raise ValueError(f"not a shape line: {line!r}")
        properties = []
        for part in shape.group(2).split("; "):
            prop = _PROPERTY.match(part.strip())
            if prop is None:
                raise ValueError(f"{shape.group(1)}: not a property: {part!r}")
            properties.append(
                Property(
                    name=prop.group(2),
                    type=prop.group(3),
                    required=prop.group(1) is not None,
                    nullable=prop.group(4) is not None,
                )
            )
        parsed[shape.group(1)] = tuple(properties)
    return parsed
