"""`serval translate`: translate a segment with an engine over gRPC, as any Serval client would."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import grpc
import typer
from rich.console import Console
from rich.table import Table

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_cli.service_client import API_KEY_ENV, NO_KEY, fail, refused_key, unreachable
from serval_common.tls import client_channel

console = Console()


def translate(
    engine_id: Annotated[str, typer.Argument(help="the engine's id")],
    segment: Annotated[str, typer.Argument(help="the text to translate")],
    n: Annotated[int, typer.Option(help="how many translations (n-best)")] = 1,
    address: Annotated[
        str, typer.Option(envvar="SERVAL_ADDRESS", help="API service gRPC address")
    ] = "127.0.0.1:50051",
    api_key: Annotated[
        str | None, typer.Option(envvar=API_KEY_ENV, help=f"your API key (or set {API_KEY_ENV})")
    ] = None,
    engine_type: Annotated[str, typer.Option(help="engine type, e.g. Nmt or Echo")] = "Nmt",
    tokens: Annotated[bool, typer.Option(help="also show tokens, confidences and alignment")] = False,
    ca_file: Annotated[
        Path | None, typer.Option(envvar="SERVAL_CA_FILE", help="PEM certificates to trust: dial with TLS")
    ] = None,
) -> None:
    """Translate SEGMENT with ENGINE_ID and print the n-best list."""
    metadata = (("x-api-key", api_key),) if api_key else ()
    request = engine_pb2.TranslateRequest(engine_type=engine_type, engine_id=engine_id, segment=segment, n=n)
    with client_channel(address, ca_file) as channel:
        try:
            response = engine_pb2_grpc.TranslationEngineApiStub(channel).Translate(
                request, metadata=metadata, timeout=60
            )
        except grpc.RpcError as exc:
            raise fail(_rpc_error(exc, address, api_key)) from None
    for rank, result in enumerate(response.results, 1):
        console.print(f"[bold]{rank}.[/] {result.translation}")
        if tokens:
            grid = Table("target token", "confidence", "aligned source tokens", box=None)
            for index, (token, confidence) in enumerate(
                zip(result.target_tokens, result.confidences, strict=False)
            ):
                aligned = [
                    result.source_tokens[a.source_index] for a in result.alignment if a.target_index == index
                ]
                grid.add_row(token, f"{confidence:.2f}", " ".join(aligned))
            console.print(grid)


def _rpc_error(exc: grpc.RpcError, address: str, api_key: str | None) -> str:
    """One sentence: how to reach the service or give the key, else what the service answered."""
    code, details = exc.code(), exc.details()
    if code == grpc.StatusCode.UNAVAILABLE and _not_connected(details):
        return unreachable(address)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return NO_KEY if not api_key else refused_key(details)
    return f"{code.name}: {details}"


CONNECT_FAILURES = ("failed to connect", "dns resolution failed", "connection refused")
"""How gRPC's own UNAVAILABLE (no connection) reads, unlike the service's (no inference capacity)."""


def _not_connected(details: str | None) -> bool:
    text = (details or "").lower()
    return any(failure in text for failure in CONNECT_FAILURES)
