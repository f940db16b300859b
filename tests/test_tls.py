"""TLS on the API service's gRPC and REST ports, and every dialer that trusts its certificate:
clients (httpx, `RestClient`, `serval translate`), build jobs (`PlatformReporter`) and an inference
node process. The certificates are self-signed ones made here, for `localhost` and 127.0.0.1."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from typer.testing import CliRunner

from serval.translation.v1 import engine_pb2, engine_pb2_grpc
from serval_api.app import ApiService
from serval_api.auth import ALL_SCOPES
from serval_cli.main import app as cli
from serval_cli.processes import RestClient
from serval_common.settings import ApiSettings, Settings
from serval_common.tls import TlsConfigError, client_channel, common_host_name, server_credentials
from tests.api.conftest import RunningApi

ENGINE_ID = "0123456789abcdef0123tls0"
TIMEOUT_S = 10


@dataclass(frozen=True)
class Pem:
    cert: Path
    key: Path


def self_signed(folder: Path, name: str) -> Pem:
    """A self-signed server certificate for `localhost` and 127.0.0.1, its own trust anchor."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = Pem(folder / f"{name}.crt", folder / f"{name}.key")
    pem.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return pem


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> Pem:
    return self_signed(tmp_path_factory.mktemp("pki"), "serval-test")


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> Pem:
    """Another self-signed certificate: trusting it must not make the service's acceptable."""
    return self_signed(tmp_path_factory.mktemp("other-pki"), "stranger")


@pytest.fixture
def tls_api(tmp_path: Path, database_url: str, pem: Pem) -> Iterator[RunningApi]:
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        api=ApiSettings(
            host="127.0.0.1", grpc_port=0, rest_port=0, tls_cert_file=pem.cert, tls_key_file=pem.key
        ),
    )
    running = RunningApi(settings)
    try:
        yield running
    finally:
        running.close()


def https_url(api: RunningApi, host: str = "127.0.0.1") -> str:
    return f"https://{host}:{api.service.rest_port}"


def trusting(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def health(channel: grpc.Channel) -> int:
    response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
    return int(response.status)


def test_half_a_tls_setting_is_a_startup_error(tmp_path: Path, pem: Pem, stranger: Pem) -> None:
    with pytest.raises(TlsConfigError, match=r"api\.tls_key_file is not set"):
        server_credentials(pem.cert, None)
    with pytest.raises(TlsConfigError, match=r"api\.tls_cert_file is not set"):
        server_credentials(None, pem.key)
    with pytest.raises(TlsConfigError, match="not a PEM certificate and its unencrypted private key"):
        server_credentials(pem.cert, stranger.key)
    with pytest.raises(TlsConfigError, match="cannot read"):
        server_credentials(tmp_path / "missing.crt", pem.key)
    assert server_credentials(None, None) is None

    settings = Settings(home=tmp_path, api=ApiSettings(grpc_port=0, rest_port=0, tls_cert_file=pem.cert))
    with pytest.raises(TlsConfigError, match="tls_key_file"):
        asyncio.run(ApiService(settings).start())


def test_settings_and_server_names(pem: Pem) -> None:
    api = ApiSettings(rest_port=8443, tls_cert_file=pem.cert, tls_key_file=pem.key)
    assert Settings(api=api).api_base_url == "https://127.0.0.1:8443"
    assert Settings().api_base_url.startswith("http://")
    assert common_host_name(["serval-api.ns.svc:50051"]) == "serval-api.ns.svc"
    assert common_host_name(["a:1", "a:2"]) == "a"
    assert common_host_name(["a:1", "b:1"]) is None
    assert common_host_name(["10.0.0.5:50051"]) is None
    assert common_host_name(["[::1]:50051"]) is None


def test_rest_serves_https_to_clients_that_trust_the_certificate(
    tls_api: RunningApi, pem: Pem, stranger: Pem, monkeypatch: pytest.MonkeyPatch
) -> None:
    for host in ("127.0.0.1", "localhost"):
        with httpx.Client(verify=trusting(pem.cert), timeout=TIMEOUT_S) as client:
            assert client.get(f"{https_url(tls_api, host)}/api/v1/status/ping").status_code == 200
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{https_url(tls_api)}/api/v1/status/ping", verify=trusting(stranger.cert))
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{tls_api.service.rest_port}/api/v1/status/ping", timeout=TIMEOUT_S)

    key = tls_api.api_key()
    assert RestClient(https_url(tls_api), key, pem.cert).call("GET", "/api/v1/status/ping")[0] == 200
    monkeypatch.setenv("SERVAL_CA_FILE", str(pem.cert))
    assert RestClient(https_url(tls_api), key).call("GET", "/api/v1/translation/engines")[0] == 200


def test_grpc_serves_tls_to_clients_that_trust_the_certificate(
    tls_api: RunningApi, pem: Pem, stranger: Pem
) -> None:
    target = tls_api.grpc_target
    with client_channel(target, pem.cert) as channel:
        assert health(channel) == health_pb2.HealthCheckResponse.SERVING
        key = tls_api.api_key()
        engine_pb2_grpc.TranslationEngineApiStub(channel).Create(
            engine_pb2.CreateRequest(
                engine_type="Echo", engine_id=ENGINE_ID, source_language="en", target_language="sw"
            ),
            metadata=(("x-api-key", key),),
            timeout=TIMEOUT_S,
        )
    with client_channel(target.replace("127.0.0.1", "localhost"), pem.cert) as channel:
        assert health(channel) == health_pb2.HealthCheckResponse.SERVING

    refused = [
        client_channel(target, None),
        client_channel(target, stranger.cert),
        client_channel(target, pem.cert, server_name="api.example.org"),
    ]
    for channel in refused:
        with channel, pytest.raises(grpc.RpcError) as error:
            health(channel)
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE

    # The engine has no build yet: the service's own answer shows the CLI reached it.
    command = ["translate", ENGINE_ID, "In the beginning", "--address", target, "--engine-type", "Echo"]
    with_ca = CliRunner().invoke(cli, command, env={"SERVAL_API_KEY": key, "SERVAL_CA_FILE": str(pem.cert)})
    assert "FAILED_PRECONDITION" in with_ca.output, with_ca.output
    plaintext = CliRunner().invoke(cli, command, env={"SERVAL_API_KEY": key, "SERVAL_CA_FILE": None})
    assert plaintext.exit_code == 1 and "cannot reach the API service at" in plaintext.output, (
        plaintext.output
    )


@pytest.mark.timeout(300)
def test_a_node_and_a_build_job_dial_with_tls(
    tls_api: RunningApi, pem: Pem, tiny_ct2_model: Path, tmp_path: Path
) -> None:
    """A real build job reports, and an inference node registers and translates, over TLS."""
    from serval_api.service.keys import create_node_token
    from serval_cli import processes
    from serval_common.store import open_store
    from tests.api.conftest import create_engine
    from tests.helpers import publish_tiny_base_model

    settings = tls_api.service.settings
    store = open_store(settings.resolved_store_url)
    publish_tiny_base_model(store, tiny_ct2_model, "tiny-nllb")
    assert tls_api.service.services is not None
    _, node_token = tls_api.run(create_node_token(tls_api.service.services.db, "tls"))
    key = tls_api.api_key(scopes=ALL_SCOPES)

    node = processes.start(
        ["node", "--home", str(tmp_path), "--api-address", tls_api.grpc_target, "--node-id", "tls-node"],
        tmp_path / "node.log",
        {
            "SERVAL_NODE__TOKEN": node_token,
            "SERVAL_NODE__TLS_CA_FILE": str(pem.cert),
            "SERVAL_NODE__TLS_SERVER_NAME": "localhost",
        },
    )
    try:
        # The inference-only build's job, run here: publish, then report over TLS as the job does.
        with httpx.Client(
            base_url=f"{https_url(tls_api)}/api/v1",
            headers={"X-API-Key": key},
            verify=trusting(pem.cert),
            timeout=TIMEOUT_S,
        ) as rest:
            engine = create_engine(rest)
            response = rest.post(f"/translation/engines/{engine['id']}/builds", json={"trainOn": []})
            assert response.status_code == 201, response.text
            spec = tls_api.launcher.specs[-1]
            job = subprocess.run(
                [sys.executable, "-m", "build_jobs", *spec.command_args()],
                env={
                    **os.environ,
                    **spec.environment(),
                    "SERVAL_HOME": str(settings.home),
                    "SERVAL_JOBS__TLS_CA_FILE": str(pem.cert),
                },
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-2000:]
            build = rest.get(f"/translation/engines/{engine['id']}/builds/{spec.build_id}").json()
            assert build["state"] == "Completed", build

        RestClient(https_url(tls_api), key, pem.cert).wait_for_node(node, timeout_s=60)
        with client_channel(tls_api.grpc_target, pem.cert) as channel:
            response = engine_pb2_grpc.TranslationEngineApiStub(channel).Translate(
                engine_pb2.TranslateRequest(
                    engine_type="Nmt", engine_id=engine["id"], segment="Blessed are the peacemakers.", n=1
                ),
                metadata=(("x-api-key", key),),
                timeout=60,
            )
        assert response.results[0].translation.strip()
        result = CliRunner().invoke(
            cli,
            ["translate", engine["id"], "Blessed are the peacemakers.", "--ca-file", str(pem.cert)],
            env={"SERVAL_API_KEY": key, "SERVAL_ADDRESS": tls_api.grpc_target},
        )
        assert result.exit_code == 0, result.output
        assert response.results[0].translation.strip() in result.output
    finally:
        code = processes.stop(node)
        print((tmp_path / "node.log").read_text()[-3000:])
    assert code == 0
