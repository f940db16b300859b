"""The one settings object. Every value comes from a default, an environment variable
(`SERVAL_` prefix, `__` between section and field: `SERVAL_API__REST_PORT=8080`) or a CLI flag.

The defaults make the embedded mode work with zero configuration: everything lives under
`SERVAL_HOME` (`./.serval`), SQLite, a local-folder model store, a local job runner and one
CPU node on loopback.
"""

from __future__ import annotations

import json
import socket
from functools import cached_property
from ipaddress import ip_network
from pathlib import Path

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from serval_common.build_options import (
    TRAINING_KEYS,
    BatchSize,
    EvalShare,
    FreezablePart,
    GradientAccumulation,
    LearningRate,
    LrSchedule,
    MaxLength,
    MaxSteps,
    TimeBudgetS,
    TrainingDefaults,
    WarmupSteps,
)

S3_CONNECT_TIMEOUT_S = 5.0
S3_READ_TIMEOUT_S = 10.0
S3_MAX_ATTEMPTS = 3
"""The S3 model store client's bounds (`StoreSettings`), also where a store is opened without settings."""


class StoreSettings(BaseModel):
    url: str | None = Field(
        default=None,
        description="Model store: `file:///path` or `s3://bucket/prefix`; default `{home}/store`.",
    )
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    s3_connect_timeout_s: float = Field(
        default=S3_CONNECT_TIMEOUT_S,
        gt=0.0,
        description="How long an S3 call waits for the store's endpoint to accept a connection before "
        "the attempt fails.",
    )
    s3_read_timeout_s: float = Field(
        default=S3_READ_TIMEOUT_S,
        gt=0.0,
        description="How long an S3 call waits for the store to answer (or for the next part of an "
        "answer) before the attempt fails: an endpoint that accepts connections but never replies holds "
        "a call at most `s3_max_attempts` times this (plus the retries' backoff of a few seconds).",
    )
    s3_max_attempts: int = Field(
        default=S3_MAX_ATTEMPTS,
        ge=1,
        description="Attempts per S3 call, the first included (botocore's standard retry mode: "
        "connection errors, timeouts, throttling and 5xx are retried with jittered backoff); 1 = no retry.",
    )


class ApiSettings(BaseModel):
    host: str = "127.0.0.1"
    grpc_port: int = 50051
    rest_port: int = 8080
    public_url: str | None = Field(default=None, description="Base URL used in `url` fields and Location.")
    instance_id: str | None = Field(default=None, description="This API replica's name in logs.")
    heartbeat_interval_s: float = 2.0
    node_timeout_s: float = Field(default=10.0, description="A node that sent nothing for this long is gone.")
    request_timeout_s: float = 30.0
    max_segment_chars: int = 2000
    max_n_best: int = 20
    public_base_model: str | None = Field(
        default=None,
        description="The base model that API keys bound to no engine translate with in the SIL Converters "
        "and LibreTranslate dialects (any pair it knows); unset: `jobs.default_base_model`.",
    )
    public_base_model_enabled: bool = Field(
        default=True,
        description="Whether unbound keys may translate with the public base model; off, they get a "
        "readable 400 and only keys bound to an engine translate in those dialects.",
    )
    max_text_chars: int = Field(
        default=5000, description="The longest text one SIL Converters or LibreTranslate request may send."
    )
    text_load_wait_s: float = Field(
        default=20.0,
        description="How long a SIL Converters or LibreTranslate request waits for a model that is loading "
        "before it answers 503 'loading, try again' (the load goes on); SIL Converters gives up at 30 s.",
    )
    max_queued_requests: int = Field(
        default=1000,
        description="Requests that may wait in this replica for an inference node slot or a model load, every "
        "owner's together; over it a request is answered 503 with Retry-After.",
    )
    max_queued_per_owner: int = Field(
        default=250,
        ge=1,
        description="Requests of one owner that may wait in this replica for a node slot; over it that owner's "
        "next request is answered 503 with Retry-After while other owners' requests still queue. A quarter of "
        "`max_queued_requests`, so that one owner cannot fill the waiting pool; far more than the closed-loop "
        "clients of any ordinary tenant, and a long text waits with at most `text_sentence_concurrency` sentences.",
    )
    text_sentence_concurrency: int = Field(
        default=8,
        ge=1,
        description="How many sentences of one SIL Converters or LibreTranslate text are sent to the nodes at once; "
        "the rest follow as they are answered. A paragraph (8 sentences or fewer) goes out whole, as before; a "
        "5,000-character text of hundreds of sentences cannot take a replica's waiting pool or a node's slots.",
    )
    lookup_cache_s: float = Field(
        default=1.0,
        description="How long the translate path reuses an API key's or engine's record instead of reading "
        "the database on every request. Changes made through any replica are seen at once (on PostgreSQL "
        "through its notifications); a change written to the database by other means, such as "
        "`serval admin api-key revoke`, within this many seconds. 0 = read every time.",
    )
    spread_load_fraction: float = Field(
        default=0.5,
        description="When every node holding a model revision is this busy (in-flight work over its slots), "
        "one more node loads it; 0 = never spread.",
    )
    completion_load_wait_s: float = Field(
        default=20.0,
        ge=0.0,
        description="How long a build's completion waits for the nodes serving the engine to load its new "
        "revision, so that translations answered after the build reads Completed come from the new model; "
        "it is then marked Completed either way. Keep it under the job's 30 s call deadline.",
    )
    failed_load_retry_s: float = Field(
        default=60.0, description="How long after a node failed to load a model revision it is asked again."
    )
    store_sweep_interval_s: float = Field(
        default=3600.0,
        description="How often the model store is swept of revision and build folders that no build owns "
        "any more (left by a process that died mid-cleanup, or a store down at the time); 0 = never.",
    )
    store_threads: int = Field(
        default=8,
        ge=1,
        description="Threads this service's model-store calls run on, apart from every other blocking "
        "call: a store that hangs can hold only these, and its calls queue for them meanwhile.",
    )
    store_health_cache_s: float = Field(
        default=5.0,
        ge=0.0,
        description="How long the health check's model-store answer is reused: health probes, however "
        "many, make at most one store call (in flight at a time) per this; 0 = a call per probe (still "
        "shared by the probes that arrive while it is in flight).",
    )
    train_segment_check_s: float = Field(
        default=5.0,
        gt=0,
        description="How often each replica compares what its nodes' smt-transfer models have learned with "
        "the engines' last trained segments and tells a node that lacks some to fetch them; it also checks "
        "when a node reports a model ready and shortly after hearing a segment was trained anywhere.",
    )
    keep_previous_revisions: int = Field(
        default=1,
        ge=0,
        description="Completed model revisions kept in the store besides each engine's current one (what "
        "routing falls back on while a new revision loads). Older ones, and the `hf/` training checkpoints of "
        "all but the current revision, are removed by the store sweep `revision_grace_s` after the build that "
        "superseded them completed, unless a node still holds them.",
    )
    revision_grace_s: float = Field(
        default=86400.0,
        ge=0,
        description="How long after a build supersedes a revision the store sweep may remove it (or its "
        "`hf/` checkpoint): nodes finish swapping and download URLs issued for it expire meanwhile; keep it "
        "above `download_url_ttl_s`.",
    )
    node_token_check_s: float = Field(
        default=5.0,
        description="How often connected nodes' tokens are checked for revocations written to the database "
        "by other means (`serval admin` on the database); a revocation through any replica disconnects "
        "its nodes at once.",
    )
    metrics_enabled: bool = Field(
        default=True,
        description="Serve Prometheus metrics, unauthenticated, at `GET /metrics` on the REST port.",
    )
    download_secret: str | None = Field(
        default=None,
        description="HMAC key signing model download URLs; random per process when unset, so "
        "replicas behind one load balancer need a shared value.",
    )
    download_url_ttl_s: float = Field(default=3600.0, description="How long a model download URL works.")
    max_upload_bytes: int = Field(
        default=100_000_000,
        description="The largest data file a client may upload (Serval's limit); a larger one answers 400.",
    )
    max_request_bytes: int = Field(
        default=1 << 20,
        description="The largest REST request body other than a file upload; a larger one answers 413.",
    )
    max_grpc_message_bytes: int = Field(
        default=4 << 20,
        description="The largest gRPC message the API service receives (from clients, build jobs and "
        "nodes); a larger one ends the call with RESOURCE_EXHAUSTED.",
    )
    max_list_items: int = Field(
        default=10_000,
        description="The most items one list in a request may hold (a corpus's files, corpus ids, "
        "filters, text ids, chapters, refs, warnings); more answer 400 / INVALID_ARGUMENT.",
    )
    deployment_environment: str = Field(
        default="Production",
        description="The environment `GET /api/v1/status/deployment-info` names (Serval's "
        "`aspNetCoreEnvironment`): Production, Staging, Development, …",
    )
    tls_cert_file: Path | None = Field(
        default=None,
        description="PEM certificate (chain); with `tls_key_file`, gRPC and REST serve TLS on their ports.",
    )
    tls_key_file: Path | None = Field(default=None, description="PEM private key of `tls_cert_file`.")


class NodeSettings(BaseModel):
    api_addresses: list[str] = Field(default_factory=lambda: ["127.0.0.1:50051"])
    token: str | None = None
    node_id: str | None = Field(
        default=None,
        description="This node's id in the admin list; default: the one it had before, kept in "
        "`{home}/node-id-{device}`, first made from the host name and the device (`gpu-a-cuda0`, "
        "`laptop-cpu`).",
    )
    device: str = Field(default="auto", description="auto, cpu or cuda")
    device_index: int = 0
    compute_type: str = Field(default="auto", description="auto: int8_float16 on CUDA, int8 on CPU")
    intra_threads: int = 1
    inter_threads: int = 1
    slots: int = 64
    families: list[str] = Field(
        default_factory=list,
        description="engine families this node serves (nmt, smt-transfer, statistical); empty: every "
        "family whose packages are installed",
    )
    cache_dir: Path | None = None
    max_batch_size: int = 32
    max_batch_wait_ms: float = Field(
        default=100.0,
        description="The most a request waits for others to join its batch; it waits 5% of what a lone "
        "request takes the model, up to this (see inference_gpu/batcher.py).",
    )
    batch_latency_target_ms: float = Field(
        default=100.0,
        ge=0.0,
        description="The longest one backend batch should take, so that a request arriving while another "
        "owner's flood keeps a model busy waits about one batch, then rides in one (about twice this in "
        "all). The node measures what each batch size costs the model and caps a batch at the largest size "
        "predicted to finish within this, but never below the size that costs twice a lone request: "
        "splitting such a batch costs throughput and saves a waiting request little. So the cap bites only "
        "where a batch's cost grows with its size: on a CPU, where a 32-verse batch costs many lone verses "
        "(the 600M model: seconds per verse, so batches of two or three), not on a GPU, where it costs "
        "about one lone verse. 100 ms leaves full batches to a model whose 32-verse batch takes less, and "
        "keeps a slower model's batches as small as is worth it. The cap holds only while owners share the "
        "model (for 30 s after requests of two owners met at it): an owner alone gets full batches. "
        "0 = no cap: batches of up to `max_batch_size` (inference_gpu/batcher.py).",
    )
    batch_weights: dict[str, float] = Field(
        default_factory=dict,
        description="Shares of a model's batches when owners' requests compete for it: "
        "`owner:<owner id>` or `key:<API key id>` → weight (default 1; an API key's weight, where set, wins "
        "over its owner's). Owners with queued requests take turns (deficit round robin), each taking "
        "as many requests per turn as its weight, so an owner of weight 2 gets two thirds of the slots "
        "beside one of weight 1, and an owner alone gets them all (inference_gpu/fair_queue.py). E.g. "
        "SERVAL_NODE__BATCH_WEIGHTS='{\"owner:scripture-forge\": 4}'.",
    )
    beam_size: int = 4
    max_input_tokens: int = 256
    max_decoding_length: int = 256
    memory_budget_bytes: int = Field(
        default=0,
        description="Most bytes of models (their files' size) held at once; before a load that "
        "would exceed it, the least recently used idle models are unloaded. 0 = unlimited.",
    )
    cache_budget_bytes: int = Field(
        default=0,
        description="Most bytes of model files kept in `cache_dir`; after each fetch, the least recently "
        "used cached revisions that no loaded model uses are deleted to fit. 0 = unlimited.",
    )
    metrics_port: int = Field(default=0, description="Serve Prometheus metrics on this port; 0 = off.")
    metrics_host: str = "127.0.0.1"
    load_retry_s: float = Field(
        default=300.0,
        description="How long a model load keeps retrying while the model store is unreachable "
        "(connection refused, timeouts, 5xx) before the model is reported FAILED.",
    )
    load_retry_initial_s: float = Field(
        default=0.5, description="First wait before retrying a model load; it doubles after each failure."
    )
    load_retry_max_s: float = Field(default=10.0, description="Longest wait between model load retries.")
    resolve_interval_s: float = Field(
        default=30.0, description="How often API addresses are re-resolved to find new replicas."
    )
    tls_ca_file: Path | None = Field(
        default=None,
        description="PEM certificates to trust; when set, the node dials the API service with TLS.",
    )
    tls_server_name: str | None = Field(
        default=None,
        description="Name the API service's certificate must carry; default: the addresses' one host name.",
    )

    @field_validator("batch_weights")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        for name, weight in value.items():
            if not name.startswith(("owner:", "key:")):
                raise ValueError(f"batch weight {name!r}: name an owner (owner:ID) or an API key (key:ID)")
            if not weight > 0:
                raise ValueError(f"batch weight {name!r}: a weight must be above 0, not {weight}")
        return value


class ClearMLSettings(BaseModel):
    """`jobs.launcher = clearml`: build jobs run as ClearML tasks (docs/clearml.md). Unset server
    and credential fields fall back to the SDK's own CLEARML_* variables and `clearml.conf`."""

    project: str = Field(default="serval", description="ClearML project the build tasks are created in.")
    default_queue: str = Field(
        default="default",
        description="Queue a build's task waits on unless its `clearmlQueue` option names one.",
    )
    image: str = Field(
        default="ghcr.io/serval-live/build-jobs:latest",
        description="Container image the agent runs a build job in; it must hold Serval installed with the "
        "`jobs` and `clearml` extras in its default python3.",
    )
    api_host: str | None = Field(default=None, description="ClearML API server URL (https://api.clear.ml).")
    web_host: str | None = Field(default=None, description="ClearML web app URL, e.g. https://app.clear.ml.")
    files_host: str | None = Field(default=None, description="ClearML file server URL.")
    access_key: str | None = Field(default=None, description="ClearML API access key.")
    secret_key: str | None = Field(default=None, description="ClearML API secret key.")
    connect_timeout_s: float = Field(
        default=10.0, description="A launch fails once signing in to the ClearML server takes this long."
    )
    request_timeout_s: float = Field(default=60.0, description="The longest one ClearML call may take.")
    poll_interval_s: float = Field(default=5.0, description="How often followed tasks' states are read.")
    job_api_address: str | None = Field(
        default=None,
        description="gRPC host:port build jobs dial to reach this API service (they run on other "
        "machines); default `api.host:api.grpc_port`.",
    )


class JobSettings(BaseModel):
    launcher: str = Field(default="local", description="local or clearml")
    max_concurrent: int = 1
    default_base_model: str = "tiny-nllb"
    tls_ca_file: Path | None = Field(
        default=None,
        description="PEM certificates to trust; when set, build jobs dial the API service with TLS.",
    )
    tls_server_name: str | None = Field(
        default=None, description="Name the API service's certificate must carry, if not the dialed host."
    )
    report_retry_s: float = Field(
        default=120.0,
        description="How long a build job keeps retrying a report the API service could not take "
        "(unavailable, restarting, overloaded) before the report, and so the build, fails.",
    )
    # The deployment's training defaults: each beats the base model's manifest and loses to the
    # build's own option of the same name (docs/build-options.md, "Where the defaults come from").
    max_steps: MaxSteps | None = Field(default=None, description="Default `maxSteps` of fine-tunes.")
    time_budget_s: TimeBudgetS | None = Field(
        default=None, description="Default `timeBudgetS` of fine-tunes."
    )
    learning_rate: LearningRate | None = Field(
        default=None, description="Default `learningRate` of fine-tunes (about 1e-4 suits NLLB-200)."
    )
    lr_schedule: LrSchedule | None = Field(default=None, description="Default `lrSchedule` of fine-tunes.")
    warmup_steps: WarmupSteps | None = Field(default=None, description="Default `warmupSteps` of fine-tunes.")
    freeze: list[FreezablePart] | None = Field(
        default=None, description='Default `freeze` of fine-tunes, a JSON list such as `["embeddings"]`.'
    )
    batch_size: BatchSize | None = Field(default=None, description="Default `batchSize` of fine-tunes.")
    gradient_accumulation: GradientAccumulation | None = Field(
        default=None, description="Default `gradientAccumulation` of fine-tunes."
    )
    max_length: MaxLength | None = Field(default=None, description="Default `maxLength` of fine-tunes.")
    eval_share: EvalShare | None = Field(default=None, description="Default `evalShare` of fine-tunes.")
    publish_worse_models: bool = Field(
        default=True,
        description="Whether a fine-tune whose held-out chrF is below the base model's is published "
        "(the build completes and says so in its message and diagnostics) or refused (the build "
        "faults and the engine keeps the model it had).",
    )
    clearml: ClearMLSettings = Field(default_factory=ClearMLSettings)

    def training_defaults(self) -> TrainingDefaults:
        """The deployment's training defaults, as `NmtBuildOptions.training` takes them."""
        return TrainingDefaults.model_validate({key: getattr(self, key) for key in TRAINING_KEYS})

    def training_environment(self) -> dict[str, str]:
        """`SERVAL_JOBS__…` variables for the training defaults and `publish_worse_models` that
        were set, for a launcher to hand its build jobs (lists as JSON)."""
        return {
            f"SERVAL_JOBS__{name.upper()}": json.dumps(value)
            if isinstance(value, list | bool)
            else str(value)
            for name in (*TRAINING_KEYS, "publish_worse_models")
            if name in self.model_fields_set and (value := getattr(self, name)) is not None
        }


class AuthSettings(BaseModel):
    jwt_secret: str | None = Field(default=None, description="HS256 shared secret for bearer JWTs.")
    jwks_url: str | None = Field(default=None, description="JWKS URL whose keys verify RS256 bearer JWTs.")
    jwt_audience: str | None = Field(default=None, description="Required `aud` claim, when set.")
    jwt_issuer: str | None = Field(default=None, description="Required `iss` claim, when set.")
    jwks_cache_s: int = Field(default=300, description="How long fetched JWKS keys are reused.")
    jwt_leeway_s: float = Field(default=0.0, description="Clock skew tolerated on `exp`/`nbf`/`iat`.")
    jwt_admin_scope_allowed: bool = Field(
        default=False,
        description="Whether a JWT's `admin` scope, and key management's (`create:api_keys`, "
        "`read:api_keys`, `delete:api_keys`), count. Off, they are dropped (the token keeps its other "
        "scopes): whoever issues client JWTs does not also hand out the admin API unless you say so.",
    )


class WebhookSettings(BaseModel):
    """Client webhooks (docs/webhooks.md): where they may point and how deliveries are retried."""

    allowed_networks: list[str] = Field(
        default_factory=list,
        description="CIDRs hooks may target though the address is loopback, private, link-local, "
        'unspecified or multicast (refused otherwise), e.g. `["10.20.0.0/16"]`.',
    )
    timeout_s: float = Field(default=10.0, description="The longest one delivery POST may take.")
    poll_interval_s: float = Field(
        default=1.0,
        description="How often each replica looks for due deliveries (retries, other replicas' events); "
        "its own events are sent at once.",
    )
    retry_base_s: float = Field(
        default=1.0,
        description="Scales Serval's retry delays (1, 2, 4, … 1024, then 2048 s after each failed attempt).",
    )
    max_attempts: int = Field(default=20, description="Attempts before a delivery is given up (Failed).")
    claim_lease_s: float = Field(
        default=60.0,
        gt=0.0,
        description="How long a claimed delivery is a replica's own unless renewed: the replica renews its "
        "claims every third of this for as long as it sends them, so only a replica that died (or lost the "
        "database) mid-delivery lets them lapse, and then any replica sends them again.",
    )
    batch_size: int = Field(
        default=64,
        ge=1,
        description="The most deliveries one replica sends at once, over all hooks (each hook is sent "
        "independently: a slow receiver holds only its own deliveries).",
    )
    hook_concurrency: int = Field(
        default=4,
        ge=1,
        description="The most deliveries to one hook in flight at once, over all replicas; one build's "
        "events go to a hook one after another, in order.",
    )
    owner_concurrency: int = Field(
        default=16,
        ge=1,
        description="The most deliveries of one owner's hooks in flight at once, over all replicas; due "
        "deliveries are claimed in turn between owners, so one owner's backlog never holds another's.",
    )
    max_hooks_per_owner: int = Field(
        default=25, ge=1, description="The most hooks one owner may register (more answer 400)."
    )
    delivered_retention_s: float = Field(
        default=7 * 86400.0,
        ge=0.0,
        description="How long a delivered event's record is kept before it is pruned; 0 = kept forever.",
    )
    failed_retention_s: float = Field(
        default=30 * 86400.0,
        ge=0.0,
        description="How long a given-up delivery's record is kept before it is pruned; 0 = kept forever.",
    )
    prune_interval_s: float = Field(
        default=600.0, gt=0.0, description="How often each replica prunes delivery records past retention."
    )

    @field_validator("allowed_networks")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        return [str(ip_network(cidr.strip(), strict=False)) for cidr in value]


class LimitSettings(BaseModel):
    """Per-key limits (docs/limits.md): one tenant cannot take what others need. An
    administrator overrides them for one key (`serval admin api-key limits`, `PUT
    /api/v1/admin/api-keys/{id}/limits`). Counted in the database, so every replica shares them and
    a restart resets nothing. 0 = no limit."""

    translate_per_minute: int = Field(
        default=60_000,
        ge=0,
        description="Translate-type requests (translate, prefix, word graph, train-segment, word alignment, "
        "the dialects' text translations) one API key may make per minute (a fixed minute for all replicas); "
        "more answer 429 / RESOURCE_EXHAUSTED with Retry-After until the next minute.",
    )
    build_starts_per_hour: int = Field(
        default=600,
        ge=0,
        description="Builds one owner may start per hour (word-alignment builds included); more answer 429.",
    )
    concurrent_long_polls: int = Field(
        default=500,
        ge=0,
        description="Long polls (REST `min-revision` and build-feed waits, gRPC WatchBuild) one API key "
        "may hold waiting at once over all replicas; more answer 429.",
    )
    refusal_delay_s: float = Field(
        default=1.0,
        ge=0.0,
        le=30.0,
        description="How long a request over a per-key limit is held before its 429 / RESOURCE_EXHAUSTED "
        "is sent (at most its Retry-After): a client that ignores Retry-After and sends again at once "
        "then costs the service a handful of requests a second per connection, not hundreds; 0 = at once.",
    )
    long_poll_lease_s: float = Field(
        default=60.0,
        gt=0.0,
        description="How long a replica's long poll counts stay in the database if it dies; a live replica "
        "renews them every third of this.",
    )
    data_file_bytes_per_owner: int = Field(
        default=2 * 1024**3,
        ge=0,
        description="Bytes of data files one owner may keep (their contents live in the shared database, so "
        "one owner cannot fill its disk for everyone); an upload or a replacement over it answers 400. "
        "2 GiB: over 20 uploads at Serval's 100 MB a file (`api.max_upload_bytes`), while a whole Bible's text "
        "is a few MB and a Paratext project's zip tens of MB. A setting only, not overridden per key.",
    )


class LearningSettings(BaseModel):
    """NMT engines that learn the verses a translator confirms (docs/learning.md): a revision that
    reads fuzzy matches learns each pair at once; a micro-build, a short fine-tune of the engine's
    current revision on the pairs confirmed since plus a replay sample of its training pairs, makes
    them part of the weights."""

    micro_build_pairs: int = Field(
        default=10,
        ge=0,
        description="Confirmed pairs since the engine's current revision that start a micro-build; 0 turns "
        "micro-builds off. Lilt retrains after about 10 segments; on a CPU each micro-build of a real NLLB-200 "
        "takes minutes, so raise it there.",
    )
    micro_build_after_s: float = Field(
        default=600.0,
        gt=0,
        description="A micro-build starts for fewer pairs once the oldest of them is this old (seconds).",
    )
    micro_build_steps: int = Field(
        default=40,
        ge=1,
        le=10_000,
        description="Optimizer steps of a micro-build's fine-tune at most (its `maxSteps`); it makes two passes "
        "over its new and replayed pairs, fewer steps when they are few.",
    )
    micro_build_replay: int = Field(
        default=4,
        ge=0,
        le=100,
        description="Training pairs replayed per confirmed pair in a micro-build, so the model keeps what it "
        "knew (at least 16 when the engine has them).",
    )
    micro_build_check_s: float = Field(
        default=30.0, gt=0, description="How often each API replica looks for engines due a micro-build."
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SERVAL_", env_nested_delimiter="__", extra="ignore")

    home: Path = Path(".serval")
    database_url: str | None = None
    log_format: str = Field(default="text", description="text or json")
    log_level: str = "INFO"
    store: StoreSettings = Field(default_factory=StoreSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    node: NodeSettings = Field(default_factory=NodeSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    limits: LimitSettings = Field(default_factory=LimitSettings)
    learning: LearningSettings = Field(default_factory=LearningSettings)

    @cached_property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.home / 'serval.db').resolve()}"

    @cached_property
    def resolved_store_url(self) -> str:
        return self.store.url or (self.home / "store").resolve().as_uri()

    @cached_property
    def node_cache_dir(self) -> Path:
        return (self.node.cache_dir or self.home / "node-cache").resolve()

    @property
    def api_instance_name(self) -> str:
        """This replica's stable name: `api.instance_id`, else the host name (a pod's name)."""
        return self.api.instance_id or socket.gethostname()

    @property
    def api_grpc_address(self) -> str:
        return f"{self.api.host}:{self.api.grpc_port}"

    @property
    def api_base_url(self) -> str:
        scheme = "https" if self.api.tls_cert_file else "http"
        return (self.api.public_url or f"{scheme}://{self.api.host}:{self.api.rest_port}").rstrip("/")
