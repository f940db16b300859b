"""Prometheus metrics of one API service: a registry per `ApiService`, so several services can
run in one process (as the tests do). REST requests are counted by route template, gRPC calls by
full method; the build, node and queue gauges are read when Prometheus scrapes."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import grpc
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from sqlalchemy import func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from serval_api.db.database import Database
from serval_api.db.models import BuildRow, BuildState, DeliveryState, WebhookDeliveryRow
from serval_common.core import WorkClass

UNMATCHED_ROUTE = "unmatched"
WEBHOOK_OUTCOMES = ("delivered", "failed_attempt", "gave_up")
RATE_LIMITS = ("translate", "build_start", "long_poll")

__all__ = ["CONTENT_TYPE_LATEST", "ApiMetrics", "GrpcMetricsInterceptor", "RestMetricsMiddleware"]


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._db: Database | None = None
        self.http_requests = Counter(
            "serval_api_http_requests",
            "REST requests by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_latency = Histogram(
            "serval_api_http_request_duration_seconds",
            "REST request latency until the response starts, by method and route template.",
            ["method", "route"],
            registry=self.registry,
        )
        self.grpc_requests = Counter(
            "serval_api_grpc_requests",
            "gRPC calls by full method and status code.",
            ["method", "code"],
            registry=self.registry,
        )
        self.store_removed = Counter(
            "serval_api_store_removed",
            "Superseded model revisions (what=revision) and their hf/ training checkpoints (what=checkpoint) "
            "the store sweep removed.",
            ["what"],
            registry=self.registry,
        )
        for what in ("revision", "checkpoint"):
            self.store_removed.labels(what=what)
        self.catch_ups = Counter(
            "serval_api_train_segment_catch_ups",
            "CatchUp messages sent to nodes whose smt-transfer model had learned fewer trained segments "
            "than its engine has (a pair that missed the node).",
            registry=self.registry,
        )
        self.grpc_latency = Histogram(
            "serval_api_grpc_request_duration_seconds",
            "gRPC call latency (whole stream for streaming calls), by full method.",
            ["method"],
            registry=self.registry,
        )
        self.builds = Gauge(
            "serval_api_builds", "Builds in the database by state.", ["state"], registry=self.registry
        )
        self.connected_nodes = Gauge(
            "serval_api_connected_inference_nodes",
            "Inference node sessions connected to this API replica.",
            registry=self.registry,
        )
        self.dispatch_queue_depth = Gauge(
            "serval_api_dispatch_queue_depth",
            "Translation requests waiting for an inference node slot or a model load.",
            registry=self.registry,
        )
        self.dispatch_wait = Histogram(
            "serval_api_dispatch_wait_seconds",
            "How long a translation request waited in this replica for an inference node slot (0 when one "
            "was free), by work class: interactive (translate, n-best, prefix, word graph, SIL Converters' "
            "short texts) or bulk (LibreTranslate lists, long texts' sentences).",
            ["work_class"],
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=self.registry,
        )
        for work_class in WorkClass:
            self.dispatch_wait.labels(work_class.value)
        self.build_job_queue_depth = Gauge(
            "serval_api_build_job_queue_depth",
            "Build jobs waiting for the job launcher.",
            registry=self.registry,
        )
        self.long_polls_waiting = Gauge(
            "serval_api_long_polls_waiting",
            "REST long polls and build watches waiting on this replica for a change.",
            registry=self.registry,
        )

        self.webhook_deliveries = Counter(
            "serval_api_webhook_deliveries",
            "Webhook delivery attempts by outcome: delivered, failed_attempt (retried later), gave_up "
            "(the last attempt failed; the delivery is Failed).",
            ["outcome"],
            registry=self.registry,
        )
        for outcome in WEBHOOK_OUTCOMES:
            self.webhook_deliveries.labels(outcome)
        self.webhook_backlog = Gauge(
            "serval_api_webhook_backlog",
            "Webhook deliveries in the database still to be sent (Pending), all replicas together.",
            registry=self.registry,
        )
        self.webhook_in_flight = Gauge(
            "serval_api_webhook_deliveries_in_flight",
            "Webhook deliveries this replica is sending now (POSTs not yet answered).",
            registry=self.registry,
        )
        self.webhook_pruned = Counter(
            "serval_api_webhook_deliveries_pruned",
            "Delivery records deleted after their retention, by state: Delivered, Failed.",
            ["state"],
            registry=self.registry,
        )
        for state in (DeliveryState.DELIVERED, DeliveryState.FAILED):
            self.webhook_pruned.labels(state.value)
        self.rate_limited = Counter(
            "serval_api_rate_limited",
            "Requests refused (429 / RESOURCE_EXHAUSTED) by a per-key limit, by limit: translate, "
            "build_start, long_poll.",
            ["limit"],
            registry=self.registry,
        )
        for limit in RATE_LIMITS:
            self.rate_limited.labels(limit)

    def observe_dispatch_wait(self, work_class: WorkClass, seconds: float) -> None:
        self.dispatch_wait.labels(work_class.value).observe(seconds)

    def bind(
        self,
        db: Database,
        *,
        connected_nodes: Callable[[], int],
        dispatch_queue_size: Callable[[], int],
        build_job_queue_depth: Callable[[], int],
        long_polls_waiting: Callable[[], int],
    ) -> None:
        """The gauges read these at scrape time; the gRPC interceptor exists before them."""
        self._db = db
        self.connected_nodes.set_function(connected_nodes)
        self.dispatch_queue_depth.set_function(dispatch_queue_size)
        self.build_job_queue_depth.set_function(build_job_queue_depth)
        self.long_polls_waiting.set_function(long_polls_waiting)

    async def scrape(self) -> bytes:
        if self._db is None:
            return generate_latest(self.registry)
        async with self._db.session() as s:
            rows = (await s.execute(select(BuildRow.state, func.count()).group_by(BuildRow.state))).all()
            backlog = await s.scalar(
                select(func.count())
                .select_from(WebhookDeliveryRow)
                .where(WebhookDeliveryRow.state == DeliveryState.PENDING.value)
            )
        counts = {str(state): int(n) for state, n in rows}
        for state in BuildState:
            self.builds.labels(state.value).set(counts.get(state.value, 0))
        self.webhook_backlog.set(backlog or 0)
        return generate_latest(self.registry)


class RestMetricsMiddleware:
    """Pure ASGI, so streamed responses pass through untouched. The route template comes from
    the router (`scope["route"]`), keeping label cardinality bounded."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_time(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                self._observe(scope, status, started)
            await send(message)

        try:
            await self.app(scope, receive, send_and_time)
        except Exception:
            self._observe(scope, 500, started)
            raise

    def _observe(self, scope: Scope, status: int, started: float) -> None:
        route = getattr(scope.get("route"), "path", None) or UNMATCHED_ROUTE
        method = scope.get("method", "")
        self.metrics.http_requests.labels(method, route, str(status)).inc()
        self.metrics.http_latency.labels(method, route).observe(time.perf_counter() - started)


class GrpcMetricsInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, metrics: ApiMetrics) -> None:
        self.metrics = metrics
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}
        """Method → its wrapped handler (gRPC calls interceptors on every call; a method's handler
        never changes, so it is wrapped once)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        for kind, factory in _HANDLER_KINDS:
            behavior = getattr(handler, kind)
            if behavior is not None:
                wrapped = factory(
                    self._wrap(method, behavior),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
                self._wrapped[method] = wrapped
                return wrapped
        return handler

    def _wrap(self, method: str, behavior: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isasyncgenfunction(behavior):

            async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                started = time.perf_counter()
                try:
                    async for response in behavior(request, context):
                        yield response
                except BaseException as e:
                    self._observe(method, _code_of(context, e), started)
                    raise
                self._observe(method, _code_of(context, None), started)

            return stream

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            started = time.perf_counter()
            try:
                response = await behavior(request, context)
            except BaseException as e:
                self._observe(method, _code_of(context, e), started)
                raise
            self._observe(method, _code_of(context, None), started)
            return response

        return unary

    def _observe(self, method: str, code: grpc.StatusCode, started: float) -> None:
        self.metrics.grpc_requests.labels(method, code.name).inc()
        self.metrics.grpc_latency.labels(method).observe(time.perf_counter() - started)


def _code_of(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    if error is None:
        return grpc.StatusCode.OK
    return grpc.StatusCode.CANCELLED if isinstance(error, asyncio.CancelledError) else grpc.StatusCode.UNKNOWN


_HANDLER_KINDS: Iterable[tuple[str, Callable[..., grpc.RpcMethodHandler]]] = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler),
    ("unary_stream", grpc.unary_stream_rpc_method_handler),
    ("stream_unary", grpc.stream_unary_rpc_method_handler),
    ("stream_stream", grpc.stream_stream_rpc_method_handler),
)
