"""`serval api` and `serval node`: the two long-running processes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from serval_cli.config import load_settings
from serval_common.logs import configure_logging

Home = Annotated[Path | None, typer.Option(envvar="SERVAL_HOME", help="data folder for the embedded mode")]


def api(
    home: Home = None,
    host: Annotated[str | None, typer.Option(help="address to listen on")] = None,
    grpc_port: Annotated[int | None, typer.Option(help="gRPC port (clients, nodes, build jobs)")] = None,
    rest_port: Annotated[int | None, typer.Option(help="REST port")] = None,
    database_url: Annotated[str | None, typer.Option(help="SQLAlchemy URL; default SQLite in HOME")] = None,
    store_url: Annotated[
        str | None, typer.Option(help="model store: file:///path or s3://bucket/prefix")
    ] = None,
) -> None:
    """Run the API service (gRPC and REST)."""
    from serval_api.app import ApiService

    settings = load_settings(
        home=home,
        database_url=database_url,
        api__host=host,
        api__grpc_port=grpc_port,
        api__rest_port=rest_port,
        store__url=store_url,
    )
    configure_logging(settings, "serval_api")
    asyncio.run(ApiService(settings).run_forever())


def node(
    home: Home = None,
    api_address: Annotated[
        list[str] | None, typer.Option(help="API service gRPC address host:port (repeat for each replica)")
    ] = None,
    token: Annotated[str | None, typer.Option(envvar="SERVAL_NODE__TOKEN", help="node token")] = None,
    node_id: Annotated[
        str | None, typer.Option(help="this node's name (default: host name + suffix)")
    ] = None,
    store_url: Annotated[
        str | None, typer.Option(help="model store: file:///path or s3://bucket/prefix")
    ] = None,
    device: Annotated[str | None, typer.Option(help="auto, cpu or cuda")] = None,
    intra_threads: Annotated[int | None, typer.Option(help="CTranslate2 threads per translation")] = None,
    slots: Annotated[int | None, typer.Option(help="requests this node accepts at once")] = None,
) -> None:
    """Run an inference node that dials the API service."""
    from inference_gpu.api_link import NodeRejected
    from inference_gpu.node import InferenceNode

    settings = load_settings(
        home=home,
        store__url=store_url,
        node__api_addresses=api_address,
        node__token=token,
        node__node_id=node_id,
        node__device=device,
        node__intra_threads=intra_threads,
        node__slots=slots,
    )
    configure_logging(settings, "inference_gpu")
    try:
        asyncio.run(InferenceNode(settings).run())
    except NodeRejected as exc:
        typer.echo(f"the API service rejected this node: {exc}", err=True)
        raise typer.Exit(2) from None
