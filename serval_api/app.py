"""The API service: one gRPC server and one REST server in the same event loop, over one
database, node registry, dispatcher and job launcher."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import socket
from collections.abc import Iterator
from typing import Any

import grpc
import uvicorn
from grpc_reflection.v1alpha import reflection

from serval.admin.v1 import admin_pb2_grpc
from serval.inference.v1 import node_pb2_grpc
from serval.translation.v1 import engine_pb2_grpc, platform_pb2_grpc
from serval.word_alignment.v1 import engine_pb2_grpc as word_alignment_engine_pb2_grpc
from serval.word_alignment.v1 import platform_pb2_grpc as word_alignment_platform_pb2_grpc
from serval_api.builds.echo import EchoLauncher
from serval_api.builds.factory import launcher_from_settings
from serval_api.db.database import Database
from serval_api.db.nodes import DatabaseNodeRecords, mark_all_nodes_gone, revoked_node_tokens
from serval_api.grpc.admin_api import AdminApi
from serval_api.grpc.calls import UndecodableRequests
from serval_api.grpc.engine_api import TranslationEngineApi
from serval_api.grpc.health import SERVICE_NAMES, add_health_services
from serval_api.grpc.platform_api import TranslationPlatformApi
from serval_api.grpc.word_alignment_api import WordAlignmentEngineApi
from serval_api.grpc.word_alignment_platform_api import WordAlignmentPlatformApi
from serval_api.metrics import ApiMetrics, GrpcMetricsInterceptor
from serval_api.rest.app import create_app
from serval_api.routing.dispatcher import Dispatcher
from serval_api.routing.fleet import Fleet
from serval_api.routing.learning import LearningSync
from serval_api.routing.node_api import NodeApiServicer
from serval_api.routing.registry import NodeRegistry
from serval_api.service import Services, echo_builds, micro_builds, platform, train_segments
from serval_api.service.build_recovery import recover_builds
from serval_api.service.changes import NODE_TOKENS
from serval_api.service.context import LONG_POLL_MAX_S
from serval_api.service.keys import verify_node_token
from serval_api.service.launcher import JobLauncher
from serval_api.service.store_sweep import sweep_forever
from serval_api.webhooks.delivery import DeliveryWorker
from serval_api.webhooks.outbox import WEBHOOK_DELIVERIES
from serval_common.settings import Settings
from serval_common.tls import server_credentials

log = logging.getLogger(__name__)

GRACE_S = 5.0


class _RestServer(uvicorn.Server):
    """Signals belong to `ApiService.run_forever`, which stops both servers together.

    `exit_now` stops it without uvicorn's idle waits: its loop notices `should_exit` only at its
    next 0.1 s tick, and its shutdown then waits a fixed 0.1 s for open connections to close even
    when none is open. A test's service stops once per test, so those waits added minutes to the
    suite (`lifespan="off"`: there is no lifespan to end)."""

    _looping: asyncio.Task[Any] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def exit_now(self) -> None:
        self.should_exit = True
        if self._looping is not None:
            self._looping.cancel()

    async def main_loop(self) -> None:
        """uvicorn ticks every 0.1 s and refreshes its Date header on every tenth tick; this loop
        ticks once a second and refreshes it on each (`on_tick(0)`), so an idle service wakes a
        tenth as often, and `exit_now` ends it at once."""
        task = self._looping = asyncio.current_task()
        try:
            while not await self.on_tick(0):
                await asyncio.sleep(1.0)
        except asyncio.CancelledError:
            if task is None or not self.should_exit:
                raise
            task.uncancel()  # `exit_now` interrupted the tick's sleep: go on to shut down
        finally:
            self._looping = None

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.server_state.connections or self.server_state.tasks:
            await super().shutdown(sockets=sockets)  # uvicorn's grace for open connections
            return
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for server in self.servers:
            await server.wait_closed()


class ApiService:
    """`launcher` defaults to the one `settings.jobs.launcher` names (`local` or `clearml`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        launcher: JobLauncher | None = None,
        long_poll_max_s: float = LONG_POLL_MAX_S,
    ) -> None:
        self.settings = settings
        self._launcher = launcher
        self._long_poll_max_s = long_poll_max_s
        self.services: Services | None = None
        self.grpc_port: int | None = None
        self.rest_port: int | None = None
        self._grpc: grpc.aio.Server | None = None
        self._rest: _RestServer | None = None
        self._rest_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._watchers: list[asyncio.Task[None]] = []
        self.metrics = ApiMetrics()
        self.deliveries: DeliveryWorker | None = None
        self._node_api: NodeApiServicer | None = None

    async def start(self) -> None:
        # Before binding anything: a half-configured TLS setting stops the service, never serves plaintext.
        credentials = server_credentials(self.settings.api.tls_cert_file, self.settings.api.tls_key_file)
        rest_socket = _bind(self.settings.api.host, self.settings.api.rest_port)
        server = grpc.aio.server(
            interceptors=[GrpcMetricsInterceptor(self.metrics), UndecodableRequests()],
            options=[("grpc.max_receive_message_length", self.settings.api.max_grpc_message_bytes)],
        )
        grpc_address = f"{self.settings.api.host}:{self.settings.api.grpc_port}"
        if credentials is None:
            grpc_port = server.add_insecure_port(grpc_address)
        else:
            grpc_port = server.add_secure_port(grpc_address, credentials)
        rest_port = rest_socket.getsockname()[1]
        settings = self.settings = _with_ports(self.settings, grpc_port=grpc_port, rest_port=rest_port)
        self.grpc_port, self.rest_port = grpc_port, rest_port

        db = Database(settings.resolved_database_url)
        await db.migrate()
        await mark_all_nodes_gone(db, settings.api_instance_name)
        registry = NodeRegistry()
        dispatcher = Dispatcher(registry, settings)
        jobs = self._launcher or launcher_from_settings(settings)
        launcher = EchoLauncher(jobs, settings.api_instance_name)
        fleet = Fleet(registry)
        learning = LearningSync(
            registry,
            functools.partial(train_segments.last_pairs, db),
            interval_s=settings.api.train_segment_check_s,
            on_catch_up=self.metrics.catch_ups.inc,
        )
        dispatcher.train_fanout.on_learning_missed = learning.check_soon
        dispatcher.router.on_slot_taken = self.metrics.observe_dispatch_wait
        services = Services(
            settings=settings,
            db=db,
            launcher=launcher,
            dispatcher=dispatcher,
            long_poll_max_s=self._long_poll_max_s,
            fleet=fleet,
        )
        self.metrics.bind(
            db,
            connected_nodes=lambda: len(registry.sessions()),
            dispatch_queue_size=dispatcher.queue_size,
            build_job_queue_depth=launcher.queue_depth,
            long_polls_waiting=lambda: services.quotas.long_polls_waiting,
        )

        async def on_exit(build_id: str, code: int, tail: str) -> None:
            await platform.job_exited(services, build_id, code, tail)

        async def on_queue(positions: dict[str, int]) -> None:
            await platform.queue_positions(services, positions)

        jobs.on_exit, jobs.on_queue = on_exit, on_queue
        jobs.store_call = services.store_call
        launcher.run_echo = functools.partial(echo_builds.run, services)
        self.services = services
        await services.changes.start(db, replica=settings.api_instance_name)
        services.quotas.on_refused = lambda limit: self.metrics.rate_limited.labels(limit.value).inc()
        await services.quotas.start()
        deliveries = DeliveryWorker(
            db, settings.webhooks, replica=settings.api_instance_name, metrics=self.metrics
        )
        services.changes.subscribe(
            lambda key: deliveries.wake() if key in (None, WEBHOOK_DELIVERIES) else None
        )
        await deliveries.start()
        self.deliveries = deliveries

        async def verify_token(token: str) -> str | None:
            return await verify_node_token(db, token)

        engine_pb2_grpc.add_TranslationEngineApiServicer_to_server(TranslationEngineApi(services), server)
        admin_pb2_grpc.add_AdminApiServicer_to_server(AdminApi(services), server)
        platform_pb2_grpc.add_TranslationPlatformApiServicer_to_server(
            TranslationPlatformApi(services), server
        )
        word_alignment_engine_pb2_grpc.add_WordAlignmentEngineApiServicer_to_server(
            WordAlignmentEngineApi(services), server
        )
        word_alignment_platform_pb2_grpc.add_WordAlignmentPlatformApiServicer_to_server(
            WordAlignmentPlatformApi(services), server
        )
        self._node_api = NodeApiServicer(
            registry,
            settings,
            verify_token,
            DatabaseNodeRecords(db),
            train_segments=train_segments.DatabaseTrainSegments(db),
        )
        node_pb2_grpc.add_InferenceNodeApiServicer_to_server(self._node_api, server)
        self._health = await add_health_services(server, services)
        reflection.enable_server_reflection(
            (
                *SERVICE_NAMES,
                "serval.admin.v1.AdminApi",
                "serval.health.v1.HealthApi",
                "grpc.health.v1.Health",
                reflection.SERVICE_NAME,
            ),
            server,
        )
        await server.start()
        self._grpc = server
        revoked_elsewhere = asyncio.Event()
        services.changes.subscribe(
            lambda key: revoked_elsewhere.set() if key in (None, NODE_TOKENS) else None
        )
        self._watchers.append(
            asyncio.create_task(
                fleet.watch_revocations(
                    lambda ids: revoked_node_tokens(db, ids),
                    settings.api.node_token_check_s,
                    revoked_elsewhere,
                ),
                name="node-token-watch",
            )
        )
        services.changes.subscribe(learning.changed)
        self._watchers.append(asyncio.create_task(learning.run(), name="train-segment-catch-up"))
        self._watchers.append(asyncio.create_task(micro_builds.sweep_forever(services), name="micro-builds"))
        await recover_builds(services)
        if settings.api.store_sweep_interval_s > 0:
            self._watchers.append(
                asyncio.create_task(
                    sweep_forever(
                        services,
                        settings.api.store_sweep_interval_s,
                        removed_listener=lambda what: self.metrics.store_removed.labels(what=what).inc(),
                    ),
                    name="store-sweep",
                )
            )

        config = uvicorn.Config(
            create_app(services, self.metrics),
            log_config=None,
            lifespan="off",
            access_log=False,
            ssl_certfile=settings.api.tls_cert_file if credentials else None,
            ssl_keyfile=settings.api.tls_key_file if credentials else None,
        )
        rest = _RestServer(config)
        self._rest = rest
        self._rest_task = asyncio.create_task(rest.serve(sockets=[rest_socket]), name="rest-server")
        while not rest.started:
            if self._rest_task.done():
                await self._rest_task
                raise RuntimeError(f"the REST server could not start on port {rest_port}")
            await asyncio.sleep(0.01)
        log.info(
            "API service ready: gRPC%s on %s:%s, REST on %s",
            "" if credentials is None else " (TLS)",
            settings.api.host,
            grpc_port,
            settings.api_base_url,
            extra={"grpc_port": grpc_port, "rest_port": rest_port},
        )

    async def stop(self) -> None:
        if self.services is not None:
            self.services.stopping.set()  # the console's long poll answers now, not at its wait's end
        for watcher in self._watchers:
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self._watchers.clear()
        if self._rest is not None:
            self._rest.exit_now()
        if self._rest_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._rest_task, GRACE_S + 1)
        if self._grpc is not None:
            await self._health.enter_graceful_shutdown()
            await self._grpc.stop(GRACE_S)
        if self._node_api is not None:
            await self._node_api.wait_closed()
            self._node_api = None
        if self.deliveries is not None:
            await self.deliveries.stop()
            self.deliveries = None
        if self.services is not None:
            await self.services.quotas.stop()
            await self.services.launcher.close()
            await self.services.changes.stop()
            await self.services.db.close()
            self.services.close()
        self._rest = self._rest_task = self._grpc = None
        self.services = None
        log.info("API service stopped")

    def request_stop(self) -> None:
        self._stopping.set()

    async def run_forever(self) -> None:
        """Start, serve until SIGINT/SIGTERM (or `request_stop`), then stop gracefully."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self.request_stop)
        await self.start()
        try:
            await self._stopping.wait()
        finally:
            await self.stop()


def _bind(host: str, port: int) -> socket.socket:
    """The REST listening socket. It names IPPROTO_TCP so that asyncio sets TCP_NODELAY on every
    accepted connection; without it Nagle's algorithm and delayed ACKs add ~40 ms to each answer."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _with_ports(settings: Settings, *, grpc_port: int, rest_port: int) -> Settings:
    """Port 0 asks for a free port; everything after binding must see the real ones."""
    api = settings.api.model_copy(update={"grpc_port": grpc_port, "rest_port": rest_port})
    return settings.model_copy(update={"api": api})
