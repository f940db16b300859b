"""Which addresses a webhook may target.

A hook's URL is chosen by a client, and the API service POSTs to it from inside the deployment: a
URL naming a loopback, private, link-local (cloud metadata at 169.254.169.254), unspecified or
multicast address would let a client reach what only the service should. Those are refused unless
`webhooks.allowed_networks` names them. A literal address (or `localhost`) is refused when the
hook is created; every delivery checks the addresses the host name resolves to then, and connects
to the address it checked, so a DNS answer that changes after creation (DNS rebinding) cannot
redirect it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network
from urllib.parse import SplitResult, urlsplit

from serval_api.errors import InvalidArgument

IpAddress = IPv4Address | IPv6Address

PAYLOAD_URL_CHARS = 2000
_LOCALHOST = ip_address("127.0.0.1")


class RefusedAddress(Exception):
    """The payload URL's host is, or resolves to, an address hooks may not target."""


class AddressPolicy:
    def __init__(self, allowed_networks: Sequence[str] = ()) -> None:
        self.allowed_networks = tuple(ip_network(cidr, strict=False) for cidr in allowed_networks)

    def refuses(self, address: IpAddress) -> bool:
        if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        for network in self.allowed_networks:
            if address.version == network.version and address in network:
                return False
        return (
            not address.is_global
            or address.is_multicast
            or address.is_unspecified
            or address.is_reserved
            or address.is_link_local
        )

    def check(self, address: IpAddress, host: str) -> None:
        if self.refuses(address):
            raise RefusedAddress(
                f"{host!r} is {address}, a loopback, private, link-local, unspecified or multicast "
                "address; hooks may target it only when webhooks.allowed_networks names it"
            )

    async def resolve(self, host: str, port: int) -> IpAddress:
        """The address to connect to: `host` resolved, every address it has checked."""
        literal = _literal(host)
        if literal is not None:
            self.check(literal, host)
            return literal
        loop = asyncio.get_running_loop()
        try:
            found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            raise RefusedAddress(f"{host!r} does not resolve: {e}") from None
        addresses = [ip_address(str(info[4][0]).partition("%")[0]) for info in found]
        if not addresses:
            raise RefusedAddress(f"{host!r} does not resolve")
        for address in addresses:
            self.check(address, host)
        return addresses[0]


def check_payload_url(url: str, policy: AddressPolicy) -> SplitResult:
    """A payload URL a hook may have: http(s), a host, no credentials, not a refused address."""
    if len(url) > PAYLOAD_URL_CHARS:
        raise InvalidArgument(f"payloadUrl: {len(url)} characters; the limit is {PAYLOAD_URL_CHARS}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as e:
        raise InvalidArgument(f"payloadUrl: not a valid URL ({e})") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise InvalidArgument("payloadUrl: the scheme must be http or https")
    host = parts.hostname
    if not host:
        raise InvalidArgument("payloadUrl: the URL names no host")
    if parts.username is not None or parts.password is not None:
        raise InvalidArgument("payloadUrl: credentials in the URL are not allowed; use the secret")
    if any(c.isspace() or c == "\x00" for c in url):
        raise InvalidArgument("payloadUrl: whitespace and NUL are not allowed")
    literal = _literal(host)
    if literal is None and (host == "localhost" or host.endswith(".localhost")):
        literal = _LOCALHOST
    if literal is not None:
        try:
            policy.check(literal, host)
        except RefusedAddress as e:
            raise InvalidArgument(f"payloadUrl: {e}") from None
    return parts


def _literal(host: str) -> IpAddress | None:
    try:
        return ip_address(host.partition("%")[0])
    except ValueError:
        return None
