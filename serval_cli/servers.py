"""`serval api` and `serval node`: the two long-running processes."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from serval_cli.config import load_settings
from serval_common.logs import configure_logging

Home = Annotated[Path | None, typer.Option(envvar="SERVAL_HOME", help="data folder for the embedded mode")]


def api(
    home: Home = None,
    host: Annotated[
        str | None,
        typer.Option(
            envvar="SERVAL_API__HOST",
            help="address to listen on (default 127.0.0.1, this machine only); 0.0.0.0 or the LAN "
            "address lets other machines reach it (docs/office-server.md)",
        ),
    ] = None,
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
    try:
        asyncio.run(ApiService(settings).run_forever())
    except OSError as exc:  # the REST port: bound first, with a plain socket
        if exc.errno != errno.EADDRINUSE:
            raise
        _port_in_use(
            settings.api.host, settings.api.rest_port, "REST", "--rest-port", "SERVAL_API__REST_PORT"
        )
    except RuntimeError as exc:  # the gRPC port: grpc's add_*_port raises "Failed to bind to address …"
        if "Failed to bind" not in str(exc):
            raise
        _port_in_use(
            settings.api.host, settings.api.grpc_port, "gRPC", "--grpc-port", "SERVAL_API__GRPC_PORT"
        )


def _port_in_use(host: str, port: int, what: str, flag: str, env: str) -> NoReturn:
    """One sentence instead of a traceback: which port, and how to choose another."""
    typer.echo(
        f"cannot listen on {host}:{port} ({what}): the port is in use (is `serval api` already running?); "
        f"choose another with {flag} or {env}",
        err=True,
    )
    raise typer.Exit(1)


def node(
    home: Home = None,
    api_address: Annotated[
        list[str] | None, typer.Option(help="API service gRPC address host:port (repeat for each replica)")
    ] = None,
    token: Annotated[str | None, typer.Option(envvar="SERVAL_NODE__TOKEN", help="node token")] = None,
    node_id: Annotated[
        str | None,
        typer.Option(
            help="this node's id (default: the one it had before, kept in HOME/node-id-DEVICE; "
            "first made from the host name and device, e.g. gpu-a-cuda0)"
        ),
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
