"""The agent and TLS: a certificate it cannot trust ends it with a sentence, not retries.

The peer is a real TLS server on 127.0.0.1 with a certificate made at test time; the agent
is the real ``fluksio-worker`` process. Trusted through ``SSL_CERT_FILE``, the same agent
reaches the server (which then refuses its token, so it also stops: exit 3 either way,
for different, stated reasons).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.engine import BIN

pytestmark = pytest.mark.process


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fluksio test engine")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "engine.pem", directory / "engine.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
async def tls_server(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    """A TLS server that refuses every token, as an engine would a bad one."""
    cert, key = _self_signed(tmp_path)

    async def refuse(_request: web.Request) -> web.Response:
        return web.json_response({"detail": "the worker token is not valid"}, status=401)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    runner = web.AppRunner(app)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"wss://127.0.0.1:{port}/api/v1/workers/attach", cert
    await runner.cleanup()


async def _agent(url: str, **env: str) -> tuple[int, str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("FLUKSIO_", "SSL_"))}
    full_env.update(env, FLUKSIO_WORKER_TOKEN="not-a-real-token")
    process = await asyncio.create_subprocess_exec(
        str(BIN / "fluksio-worker"),
        "--url",
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=full_env,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, output.decode(errors="replace")


async def test_an_untrusted_certificate_ends_the_agent_saying_why(
    tls_server: tuple[str, Path],
) -> None:
    url, _cert = tls_server
    code, output = await _agent(url)
    port = url.split(":")[2].split("/")[0]
    assert code == 3, output
    assert f"the engine's TLS certificate at 127.0.0.1:{port} is not trusted" in output
    assert "self-signed certificate" in output
    assert "reconnecting" not in output, "retrying cannot make a certificate trusted"


async def test_a_certificate_trusted_through_ssl_cert_file_is_accepted(
    tls_server: tuple[str, Path],
) -> None:
    url, cert = tls_server
    code, output = await _agent(url, SSL_CERT_FILE=str(cert))
    assert code == 3, output
    assert "not trusted" not in output
    assert "the worker token is not valid" in output, "it reached the server over TLS"
