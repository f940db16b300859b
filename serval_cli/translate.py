"""`serval translate`: translate a segment with an engine over gRPC, as any Serval client would."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import grpc
import typer
from rich.console import Console
from rich.table import Table

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_common.tls import client_channel

console = Console()


def translate(
    engine_id: Annotated[str, typer.Argument(help="the engine's id")],
    segment: Annotated[str, typer.Argument(help="the text to translate")],
    n: Annotated[int, typer.Option(help="how many translations (n-best)")] = 1,
    address: Annotated[
        str, typer.Option(envvar="SERVAL_ADDRESS", help="API service gRPC address")
    ] = "127.0.0.1:50051",
    api_key: Annotated[str | None, typer.Option(envvar="SERVAL_API_KEY", help="API key")] = None,
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
            console.print(f"[red]{exc.code().name}[/]: {exc.details()}")
            raise typer.Exit(1) from None
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
