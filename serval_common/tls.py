"""TLS for every gRPC connection: the API service's server credentials and the one way every
dialer (inference nodes, build jobs, `serval translate`) opens a channel.

A dialer given no CA file dials in plaintext, as the embedded defaults do; given one, it dials
with TLS and trusts only the certificates in that file (a self-signed certificate, a private CA
or a bundle of public roots). See docs/tls.md.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc

TARGET_NAME_OVERRIDE = "grpc.ssl_target_name_override"

ChannelOption = tuple[str, Any]


class TlsConfigError(ValueError):
    """A TLS setting is incomplete or names a file that cannot be read."""


def _read(path: str | Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def server_tls_files(cert_file: str | Path | None, key_file: str | Path | None) -> tuple[Path, Path] | None:
    """Both files when TLS is configured, None when neither is; exactly one of them is an error,
    raised before anything listens so a half-configured service never serves plaintext."""
    if cert_file is None and key_file is None:
        return None
    if cert_file is None or key_file is None:
        missing = "api.tls_key_file" if key_file is None else "api.tls_cert_file"
        raise TlsConfigError(
            f"TLS needs both api.tls_cert_file and api.tls_key_file; {missing} is not set "
            "(SERVAL_API__TLS_CERT_FILE / SERVAL_API__TLS_KEY_FILE)"
        )
    return Path(cert_file), Path(key_file)


def server_credentials(
    cert_file: str | Path | None, key_file: str | Path | None
) -> grpc.ServerCredentials | None:
    """gRPC server credentials from a PEM certificate (chain) and its private key; None when
    neither is configured (plaintext)."""
    files = server_tls_files(cert_file, key_file)
    if files is None:
        return None
    cert, key = files
    chain, private_key = _read(cert, "TLS certificate"), _read(key, "TLS private key")
    # gRPC only reports a bad pair when the first client connects; check it here instead. The
    # empty password refuses an encrypted key (gRPC cannot use one) rather than prompting for it.
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key, password=b"")
    except ssl.SSLError as exc:
        raise TlsConfigError(
            f"{cert} and {key} are not a PEM certificate and its unencrypted private key: {exc}"
        ) from None
    return grpc.ssl_server_credentials([(private_key, chain)])


def channel_credentials(ca_file: str | Path) -> grpc.ChannelCredentials:
    """Credentials trusting only the PEM certificates in `ca_file`."""
    return grpc.ssl_channel_credentials(root_certificates=_read(ca_file, "CA file"))


def _with_name(options: Sequence[ChannelOption], server_name: str | None) -> list[ChannelOption]:
    return [*options, (TARGET_NAME_OVERRIDE, server_name)] if server_name else list(options)


def client_channel(
    address: str,
    ca_file: str | Path | None,
    server_name: str | None = None,
    options: Sequence[ChannelOption] = (),
) -> grpc.Channel:
    """A blocking channel to `address`: TLS trusting `ca_file` when given, else plaintext.
    `server_name` is the name the server's certificate must carry when it is not the dialed host;
    `options` are passed on to gRPC."""
    if ca_file is None:
        return grpc.insecure_channel(address, options=list(options))
    return grpc.secure_channel(
        address, channel_credentials(ca_file), options=_with_name(options, server_name)
    )


def aio_client_channel(
    address: str,
    ca_file: str | Path | None,
    server_name: str | None = None,
    options: Sequence[ChannelOption] = (),
) -> grpc.aio.Channel:
    """`client_channel` for grpc.aio."""
    if ca_file is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    return grpc.aio.secure_channel(
        address, channel_credentials(ca_file), options=_with_name(options, server_name)
    )


def common_host_name(addresses: list[str]) -> str | None:
    """The one DNS host name all of `addresses` (`host:port`) share, if they do.

    A node resolves a name to one address per API replica and dials the IP addresses, so without
    this the replicas' certificate would be checked against an IP address, not the name the
    node was configured with."""
    hosts = {address.rpartition(":")[0].strip("[]") for address in addresses}
    if len(hosts) != 1:
        return None
    (host,) = hosts
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return host or None
    return None
