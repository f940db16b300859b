"""Closed-loop clients for the full path: `clients` concurrent callers, each sending its next verse as
soon as its previous answer arrives, over gRPC (Serval's `TranslationEngineApi`) or REST, all on one
event loop so the load generator itself costs little CPU."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import grpc

from serval.translation.v1 import engine_pb2, engine_pb2_grpc

Send = Callable[[str], Awaitable[str]]
"""Translate one verse; returns the translation."""


@dataclass
class Outcome:
    seconds: float
    latencies_s: list[float] = field(default_factory=list)
    translations: dict[int, str] = field(default_factory=dict)
    failed: int = 0
    errors: list[str] = field(default_factory=list)


async def closed_loop(send: Send, sentences: list[str], clients: int) -> Outcome:
    """Every verse once, `clients` at a time; a failed request is counted, never retried."""
    outcome = Outcome(seconds=0.0)
    next_index = iter(range(len(sentences)))

    async def client() -> None:
        for index in next_index:
            started = time.perf_counter()
            try:
                outcome.translations[index] = await send(sentences[index])
            except (grpc.aio.AioRpcError, aiohttp.ClientError, RuntimeError) as exc:
                outcome.failed += 1
                if len(outcome.errors) < 5:
                    outcome.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            else:
                outcome.latencies_s.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    outcome.seconds = time.perf_counter() - started
    return outcome


class GrpcClient:
    """Requests go to `engine_id`, or to each of a list of engines in turn."""

    def __init__(self, target: str, api_key: str, engine_id: str | list[str]) -> None:
        self._channel = grpc.aio.insecure_channel(target)
        self._stub = engine_pb2_grpc.TranslationEngineApiStub(self._channel)
        self._metadata = (("x-api-key", api_key),)
        self._engines = [engine_id] if isinstance(engine_id, str) else engine_id
        self._sent = 0

    async def send(self, segment: str) -> str:
        engine_id = self._engines[self._sent % len(self._engines)]
        self._sent += 1
        reply = await self._stub.Translate(
            engine_pb2.TranslateRequest(engine_type="Nmt", engine_id=engine_id, segment=segment, n=1),
            metadata=self._metadata,
            timeout=600,
        )
        return str(reply.results[0].translation)

    async def close(self) -> None:
        await self._channel.close()


class RestClient:
    """Also records the `X-Model-Revision` of each answer, for the hot-swap scenario. aiohttp, since
    httpx spent 9 ms of CPU per request at 64 connections, more than the API service and node
    together, and the load generator shares the cores with the system under test."""

    def __init__(self, base_url: str, api_key: str, engine_id: str, clients: int) -> None:
        self._base_url = base_url
        self._headers = {"X-API-Key": api_key}
        self._clients = clients
        self._session: aiohttp.ClientSession | None = None
        self._path = f"/api/v1/translation/engines/{engine_id}/translate"
        self.revisions: list[tuple[float, int]] = []

    async def send(self, segment: str) -> str:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                self._base_url,
                headers=self._headers,
                connector=aiohttp.TCPConnector(limit=self._clients),
                timeout=aiohttp.ClientTimeout(total=600),
            )
        async with self._session.post(self._path, json=segment) as response:
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {(await response.text())[:200]}")
            self.revisions.append((time.monotonic(), int(response.headers["x-model-revision"])))
            return str((await response.json())["translation"])

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class SilConvertersClient:
    """SIL Converters' NLLB Translator dialect (`POST /api/v1/translate/`), which reads the text
    only: the node skips the confidences' scoring pass and the attention for it."""

    def __init__(self, base_url: str, api_key: str, clients: int, source: str, target: str) -> None:
        self._base_url = base_url
        self._headers = {"Authorization": f"SIL-NLLB-Auth-Key {api_key}"}
        self._clients = clients
        self._pair = {"sourceLanguage": source, "targetLanguage": target}
        self._session: aiohttp.ClientSession | None = None

    async def send(self, segment: str) -> str:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                self._base_url,
                headers=self._headers,
                connector=aiohttp.TCPConnector(limit=self._clients),
                timeout=aiohttp.ClientTimeout(total=600),
            )
        async with self._session.post("/api/v1/translate/", json={**self._pair, "text": segment}) as response:
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {(await response.text())[:200]}")
            return str((await response.json())["translatedText"])

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
