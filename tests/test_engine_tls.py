"""The engine over TLS: HTTPS and WSS on one port, and who is trusted, with real processes.

Certificates are made at test time by a private CA (``tests/support/certs.py``). The
engine serves with ``--tls-cert``/``--tls-key``; our agent trusts the CA with ``--ca-file``
and runs a node whose artifacts cross HTTPS from the call's own process. An expired
certificate, one for another name, and an engine whose CA the agent lacks each end the
agent with a sentence naming the host and the reason. Plain HTTP off loopback, half a
certificate, or an unusable one stop ``fluksio serve`` with one sentence.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fluksio.api.server import certificate_warning
from tests.support.certs import CertificateAuthority, KeyPair
from tests.support.cli import fluksio
from tests.support.engine import BIN, EngineProcess, start_engine
from tests.support.runs import code, nodes_of, run_flow, wait_run
from tests.support.worker import (
    WorkerProcess,
    attach_url,
    start_labelled_worker,
    start_worker,
    worker_cli,
)

pytestmark = pytest.mark.process

NODE = code("""
    import fluksio

    def process():
        ref = fluksio.save_artifact(b"over tls " * 1000, name="t.bin")
        with open(fluksio.load_artifact(ref), "rb") as back:
            return {"digest": ref["digest"], "size": len(back.read())}
""")


@pytest.fixture
def ca(tmp_path: Path) -> CertificateAuthority:
    return CertificateAuthority(tmp_path)


def _tls_engine(tmp_path: Path, pair: KeyPair, name: str = "engine") -> EngineProcess:
    args = ("--tls-cert", str(pair.cert), "--tls-key", str(pair.key))
    return start_engine(tmp_path / f"{name}-data", tmp_path / f"{name}-logs", args=args)


@pytest.fixture
def trusted(monkeypatch: pytest.MonkeyPatch, ca: CertificateAuthority) -> None:
    """This test process (its REST calls) trusts the CA too."""
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.pem))


@pytest.fixture
def cleanup() -> Iterator[list[EngineProcess | WorkerProcess]]:
    started: list[EngineProcess | WorkerProcess] = []
    yield started
    for process in reversed(started):
        process.stop()


def test_https_and_wss_on_one_port_and_a_node_moves_artifacts_over_https(
    tmp_path: Path,
    ca: CertificateAuthority,
    trusted: None,
    cleanup: list[EngineProcess | WorkerProcess],
) -> None:
    engine = _tls_engine(tmp_path, ca.issue("engine", ["127.0.0.1", "localhost"]))
    cleanup.append(engine)
    assert engine.url.startswith("https://127.0.0.1:")
    admin = engine.login()
    worker = start_labelled_worker(
        engine,
        admin,
        "tls",
        tmp_path / "worker",
        "--ca-file",
        str(ca.pem),
        "--artifact-transport",
        "http",  # through HTTPS, not the shared directory
        token_name="tls-box",
    )
    cleanup.append(worker)
    assert attach_url(engine).startswith("wss://")
    run_id = run_flow(engine, admin, "tls", [{"id": "n", "worker": "tls", "code": NODE}])
    run = wait_run(engine, admin, run_id, timeout=60)
    node = nodes_of(run)["n"]
    assert run["state"] == "succeeded", node
    assert node["result"]["size"] == 9000
    assert node["ran_on"] == "tls-box/" + node["provenance"]["host"]
    assert "eyJ" not in worker.logs()
    # Over TLS the engine sends in large writes of its own (not sendfile): ranges still hold.
    digest = node["result"]["digest"]
    whole = engine.client(admin).request("GET", f"/artifacts/{digest}")
    assert whole.status == 200 and whole.body == b"over tls " * 1000
    part = engine.client(admin).request(
        "GET", f"/artifacts/{digest}", headers={"Range": "bytes=9-17"}
    )
    assert part.status == 206 and part.body == b"over tls "


def test_connect_to_reaches_the_engine_elsewhere_and_still_verifies_its_name(
    tmp_path: Path,
    ca: CertificateAuthority,
    trusted: None,
    cleanup: list[EngineProcess | WorkerProcess],
) -> None:
    """``--connect-to``: the worker dials another address (a login node's relay, here the
    engine's own) for the URL's name; the certificate is checked against that name, and
    the call's artifacts take the same way."""
    engine = _tls_engine(tmp_path, ca.issue("engine", ["engine.example", "127.0.0.1"]))
    cleanup.append(engine)
    port = engine.url.rsplit(":", 1)[1]
    admin = engine.login()
    token = engine.mint(admin, "routed", ["routed"])["token"]
    named = f"wss://engine.example:{port}/api/v1/workers/attach"
    worker = start_worker(
        engine,
        token,
        tmp_path / "worker",
        "--labels",
        "routed",
        "--ca-file",
        str(ca.pem),
        "--connect-to",
        f"127.0.0.1:{port}",
        "--artifact-transport",
        "http",
        url=named,
    )
    cleanup.append(worker)
    run_id = run_flow(engine, admin, "routed", [{"id": "n", "worker": "routed", "code": NODE}])
    run = wait_run(engine, admin, run_id, timeout=60)
    assert run["state"] == "succeeded", nodes_of(run)["n"]
    assert nodes_of(run)["n"]["result"]["size"] == 9000

    # Another name at the same address: the certificate does not name it, so no trust.
    done = subprocess.run(
        [
            str(BIN / "fluksio-worker"),
            "--url",
            f"wss://other.example:{port}/api/v1/workers/attach",
            "--connect-to",
            f"127.0.0.1:{port}",
            "--ca-file",
            str(ca.pem),
        ],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(("FLUKSIO_", "SSL_"))},
            "FLUKSIO_WORKER_TOKEN": token,
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert f"the engine's TLS certificate at other.example:{port} is not trusted" in done.stderr


def test_connect_to_that_is_not_host_and_port_is_a_usage_error() -> None:
    done = worker_cli(
        "--url", "wss://engine.example/api/v1/workers/attach", "--connect-to", "relay"
    )
    assert done.returncode == 2
    assert "--connect-to takes HOST:PORT (where to connect instead), not 'relay'" in done.stderr


@pytest.mark.parametrize(
    ("make", "said"),
    [
        ("unknown-ca", "unable to get local issuer certificate"),
        ("expired", "certificate has expired"),
        ("wrong-name", "IP address mismatch"),
    ],
)
def test_a_certificate_the_agent_cannot_trust_ends_it_with_a_sentence(
    tmp_path: Path,
    *,
    ca: CertificateAuthority,
    trusted: None,
    cleanup: list[EngineProcess | WorkerProcess],
    make: str,
    said: str,
) -> None:
    other = CertificateAuthority(tmp_path, name="another CA")
    pair = {
        "unknown-ca": lambda: other.issue("engine", ["127.0.0.1"]),
        "expired": lambda: ca.issue(
            "engine", ["127.0.0.1"], valid_for=-datetime.timedelta(hours=1)
        ),
        "wrong-name": lambda: ca.issue("engine", ["10.9.8.7", "elsewhere.example"]),
    }[make]()
    # The engine serves any of these: whether to trust it is the client's call.
    engine = start_engine(
        tmp_path / "data",
        tmp_path / "logs",
        args=("--tls-cert", str(pair.cert), "--tls-key", str(pair.key)),
    )
    cleanup.append(engine)
    if make == "expired":  # served, but not without a word at start
        assert f"--tls-cert {pair.cert} expired on " in engine.logs()
    port = engine.url.rsplit(":", 1)[1]
    done = subprocess.run(
        [str(BIN / "fluksio-worker"), "--url", attach_url(engine), "--ca-file", str(ca.pem)],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(("FLUKSIO_", "SSL_"))},
            "FLUKSIO_WORKER_TOKEN": "not-a-real-token",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert f"the engine's TLS certificate at 127.0.0.1:{port} is not trusted" in done.stderr
    assert said in done.stderr, done.stderr
    assert "reconnecting" not in done.stderr


def test_serve_refuses_plain_http_off_loopback_and_bad_certificates(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    data = tmp_path / "data"
    # Refused before anything binds.
    everywhere = "0.0.0.0"  # noqa: S104
    plain = fluksio("serve", "--data-dir", str(data), "--host", everywhere, "--port", "0")
    assert plain.returncode == 2
    assert "refusing to serve plain HTTP on 0.0.0.0" in plain.stderr
    assert "--insecure when a TLS proxy" in plain.stderr
    pair = ca.issue("engine", ["127.0.0.1"])
    half = fluksio("serve", "--data-dir", str(data), "--tls-cert", str(pair.cert))
    assert half.returncode == 2 and "--tls-cert and --tls-key go together" in half.stderr
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    bad = fluksio(
        "serve", "--data-dir", str(data), "--tls-cert", str(junk), "--tls-key", str(pair.key)
    )
    assert bad.returncode == 2, bad.stderr
    assert f"--tls-cert {junk} / --tls-key {pair.key}: cannot be used" in bad.stderr
    assert not (data / "engine.json").exists(), "it never listened"


def test_a_bad_ca_file_is_a_usage_error(tmp_path: Path) -> None:
    junk = tmp_path / "ca.pem"
    junk.write_text("not a certificate\n")
    done = worker_cli("--url", "wss://127.0.0.1:1/api/v1/workers/attach", "--ca-file", str(junk))
    assert done.returncode == 2
    assert f"--ca-file: {junk} cannot be read as PEM certificates" in done.stderr


def test_a_certificate_near_its_end_or_not_yet_valid_is_named_at_start(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    now = time.time()
    soon = ca.issue("soon", ["127.0.0.1"], valid_for=datetime.timedelta(days=3))
    assert str(certificate_warning(soon.cert, now)).startswith(
        f"--tls-cert {soon.cert} expires on "
    )
    assert "in 3.0 days" in str(certificate_warning(soon.cert, now))
    lasting = ca.issue("lasting", ["127.0.0.1"], valid_for=datetime.timedelta(days=90))
    assert certificate_warning(lasting.cert, now) is None
    assert "is not valid before" in str(certificate_warning(lasting.cert, now - 86400))
