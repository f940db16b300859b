"""API addresses: a host name becomes one link address per resolved address."""

from __future__ import annotations

from inference_gpu.node import resolve_addresses


def test_a_name_resolves_to_every_address_and_literals_stay() -> None:
    resolved = resolve_addresses(["localhost:50051", "127.0.0.1:50052", "no-such-host.invalid:1"])
    assert "127.0.0.1:50051" in resolved and "localhost:50051" not in resolved
    assert "127.0.0.1:50052" in resolved
    assert resolved[-1] == "no-such-host.invalid:1"
    assert len(resolved) == len(set(resolved))
