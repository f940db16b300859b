"""Sending one webhook POST: signed, to the address the policy checked, within the timeout.

It stands apart from the worker because it is the only part that talks to receivers: the HTTP
client, the signature, the address check (a payload URL's host is resolved once, checked against
`allowed_networks`, and the connection goes to that very address, while TLS still verifies the
certificate against the host name) and turning every way a POST can go wrong into an error text.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from serval_api.webhooks.addresses import AddressPolicy, RefusedAddress
from serval_common.settings import WebhookSettings

SIGNATURE_HEADER = "X-Hub-Signature-256"


def signature(secret: str, body: bytes) -> str:
    """The `X-Hub-Signature-256` value of `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Attempt:
    """How one POST went: the receiver's HTTP status (None: no answer), and why it failed (None:
    it was delivered, a 2xx answer)."""

    status: int | None
    error: str | None


class WebhookSender:
    """POSTs payloads to receivers over one HTTP client; `aclose` when done."""

    def __init__(self, settings: WebhookSettings, *, verify: ssl.SSLContext | bool = True) -> None:
        """`verify`: how receivers' TLS certificates are checked (default: the system's CAs)."""
        self.timeout_s = settings.timeout_s
        self.policy = AddressPolicy(settings.allowed_networks)
        # No proxies from the environment: a proxy would connect to the host name again, past the address check.
        self._client = httpx.AsyncClient(
            timeout=settings.timeout_s,
            follow_redirects=False,
            trust_env=False,
            verify=verify,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=settings.batch_size),
        )

    async def attempt(self, payload_url: str, secret: str, body: str) -> Attempt:
        """POST `body`, signed with `secret`, to `payload_url`, within the timeout."""
        status: int | None = None
        error: str | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                status = await self._post(payload_url, secret, body.encode())
            if not 200 <= status < 300:
                error = f"the payload URL answered HTTP {status}"
        except RefusedAddress as e:
            error = f"refused: {e}"
        except (httpx.HTTPError, OSError, TimeoutError) as e:
            error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        return Attempt(status=status, error=error)

    async def _post(self, payload_url: str, secret: str, body: bytes) -> int:
        parts = urlsplit(payload_url)
        host = parts.hostname or ""
        https = parts.scheme.lower() == "https"
        address = await self.policy.resolve(host, parts.port or (443 if https else 80))
        pinned = f"[{address}]" if address.version == 6 else str(address)
        if parts.port is not None:
            pinned += f":{parts.port}"
        url = urlunsplit((parts.scheme, pinned, parts.path or "/", parts.query, ""))
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(secret, body),
            "Host": parts.netloc.rpartition("@")[2],
            "User-Agent": "serval-live-webhooks",
        }
        # TLS still verifies the certificate against the host name, sent as SNI.
        extensions = {"sni_hostname": host} if https else {}
        request = self._client.build_request(
            "POST", url, content=body, headers=headers, extensions=extensions
        )
        response = await self._client.send(request, stream=True)
        await response.aclose()
        return response.status_code

    async def aclose(self) -> None:
        await self._client.aclose()
