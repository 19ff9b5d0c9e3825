"""The engine behind Debian's real nginx, configured as ``docs/deploying.md`` says.

nginx terminates TLS (a certificate from a CA made here) and proxies to an engine on
loopback started with ``--public-url`` and ``--trusted-proxy 127.0.0.1``. Through it: our
agent attaches over wss and runs calls; 256 MiB crosses each way, streamed (nginx's
temporary directories stay empty); a call silent for 60 s finishes; and login throttling
sees each real client (127.0.0.2 and 127.0.0.3 connect to nginx from their own loopback
addresses).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import ssl
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fluksio.client.sse import EventParser
from tests.support.certs import CertificateAuthority
from tests.support.engine import (
    SUPERUSER,
    SUPERUSER_PASSWORD,
    EngineProcess,
    free_port,
    start_engine,
)
from tests.support.nginx import Nginx, start_nginx
from tests.support.runs import code, get_run, put_flow, start_run, wait_run
from tests.support.wait import wait_for
from tests.support.worker import start_labelled_worker

pytestmark = pytest.mark.contract

SIZE = 256 * 1024 * 1024
CHUNK = 1024 * 1024

SILENT = code(
    """
    import time

    def process():
        time.sleep(60)
        return "still attached"
    """
)
MAKES_BIG = code(
    f"""
    import hashlib, os, tempfile, fluksio

    def process():
        digest = hashlib.sha256()
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "big.bin")
            with open(path, "wb") as out:
                for _ in range({SIZE // CHUNK}):
                    chunk = os.urandom({CHUNK})
                    digest.update(chunk)
                    out.write(chunk)
            ref = fluksio.save_artifact(path, name="big.bin")
        return {{"ref": ref, "sha256": digest.hexdigest()}}
    """
)
READS_BIG = code(
    """
    import hashlib, fluksio

    def process(ref):
        digest = hashlib.sha256()
        with open(fluksio.load_artifact(ref), "rb") as source:
            while chunk := source.read(1 << 20):
                digest.update(chunk)
        return digest.hexdigest()
    """
)


class Through:
    """HTTPS requests to nginx from one loopback address, trusting the test CA."""

    def __init__(self, nginx: Nginx, ca: Path, source: str = "127.0.0.1") -> None:
        self._port = nginx.port
        self._context = ssl.create_default_context(cafile=str(ca))
        self._source = source

    def connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            "127.0.0.1",
            self._port,
            context=self._context,
            source_address=(self._source, 0),
            timeout=60,
        )

    def login(self, username: str, password: str) -> tuple[int, dict[str, str]]:
        connection = self.connection()
        try:
            form = urllib.parse.urlencode({"username": username, "password": password})
            connection.request(
                "POST",
                "/api/v1/login/access-token",
                body=form,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
            )
            answer = connection.getresponse()
            return answer.status, json.loads(answer.read() or b"{}")
        finally:
            connection.close()


@pytest.fixture
def deployed(tmp_path: Path) -> Iterator[tuple[EngineProcess, Nginx, CertificateAuthority]]:
    (tmp_path / "ca").mkdir()
    ca = CertificateAuthority(tmp_path / "ca")
    engine_port, nginx_port = free_port(), free_port()
    engine = start_engine(
        tmp_path / "data",
        tmp_path / "logs",
        port=engine_port,
        args=(
            "--public-url",
            f"https://127.0.0.1:{nginx_port}",
            "--trusted-proxy",
            "127.0.0.1",
        ),
    )
    try:
        nginx = start_nginx(
            tmp_path / "nginx", nginx_port, engine_port, ca.issue("proxy", ["127.0.0.1"])
        )
    except BaseException:
        engine.stop()
        raise
    yield engine, nginx, ca
    nginx.stop()
    engine.stop()


def test_behind_the_documented_nginx(
    deployed: tuple[EngineProcess, Nginx, CertificateAuthority], tmp_path: Path
) -> None:
    engine, nginx, ca = deployed
    admin = engine.login()
    worker = start_labelled_worker(
        engine,
        admin,
        "edge",
        tmp_path / "w",
        "--parallel",
        "3",
        "--ca-file",
        str(ca.pem),
        "--artifact-transport",
        "http",  # this host shares the engine's disk: make the bytes cross nginx
        url=f"wss://127.0.0.1:{nginx.port}/api/v1/workers/attach",
    )
    try:
        # A call that says nothing for 60 s, started first; the rest happens meanwhile.
        assert put_flow(engine, admin, "silent", [{"id": "s", "worker": "edge", "code": SILENT}])
        silent = start_run(engine, admin, "silent")["id"]
        wait_for(
            lambda: get_run(engine, admin, silent)["state"] == "running",
            timeout=30,
            what="the silent call to start on the worker behind nginx",
        )

        # 256 MiB from a node, up through nginx, then down through nginx to this test.
        assert put_flow(engine, admin, "up", [{"id": "big", "worker": "edge", "code": MAKES_BIG}])
        made = wait_run(engine, admin, start_run(engine, admin, "up")["id"], timeout=120)
        assert made["state"] == "succeeded", made
        result = made["nodes"][0]["result"]
        assert result["ref"]["size"] == SIZE
        through = Through(nginx, ca.pem)
        assert _download_sha256(through, result["ref"]["digest"], admin) == result["sha256"]

        # 256 MiB from this test, up through nginx, then down to a node through nginx.
        sent = tmp_path / "sent.bin"
        sent_sha = _random_file(sent)
        ref = _upload(through, sent, admin)
        assert ref["digest"] == f"sha256:{sent_sha}"
        nodes = [{"id": "read", "worker": "edge", "code": READS_BIG, "params": {"ref": ref}}]
        assert put_flow(engine, admin, "down", nodes)
        read = wait_run(engine, admin, start_run(engine, admin, "down")["id"], timeout=120)
        assert read["state"] == "succeeded", read
        assert read["nodes"][0]["result"] == sent_sha
        assert nginx.spooled() == [], "nginx buffered a body to disk"

        # Each client is throttled by its own address, as nginx saw it.
        typos = Through(nginx, ca.pem, source="127.0.0.2")
        statuses = [typos.login(f"nobody{i}", "wrong")[0] for i in range(21)]
        assert statuses[:20] == [401] * 20 and statuses[20] == 429, statuses
        other = Through(nginx, ca.pem, source="127.0.0.3")
        status, answer = other.login(SUPERUSER, SUPERUSER_PASSWORD)
        assert status == 200 and answer["access_token"]
        assert '"remote": "127.0.0.2"' in engine.logs(), "the engine logged the real client"

        finished = wait_run(engine, admin, silent, timeout=90)
        assert finished["state"] == "succeeded", finished
        assert finished["nodes"][0]["result"] == "still attached"
    finally:
        worker.stop()


def _random_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("wb") as out:
        for _ in range(SIZE // CHUNK):
            chunk = os.urandom(CHUNK)
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _upload(through: Through, path: Path, token: str) -> dict[str, object]:
    connection = through.connection()
    try:
        with path.open("rb") as body:
            connection.request(
                "PUT",
                "/api/v1/artifacts?name=sent.bin",
                body=body,  # streamed from the file, never whole in memory
                headers={"Authorization": f"Bearer {token}", "Content-Length": str(SIZE)},
            )
            answer = connection.getresponse()
            payload = answer.read()
        assert answer.status in (200, 201), payload
        ref: dict[str, object] = json.loads(payload)
        return ref
    finally:
        connection.close()


def _download_sha256(through: Through, digest: object, token: str) -> str:
    connection = through.connection()
    try:
        connection.request(
            "GET", f"/api/v1/artifacts/{digest}", headers={"Authorization": f"Bearer {token}"}
        )
        answer = connection.getresponse()
        assert answer.status == 200
        hashed = hashlib.sha256()
        while chunk := answer.read(CHUNK):
            hashed.update(chunk)
        return hashed.hexdigest()
    finally:
        connection.close()


def test_the_live_feed_and_the_metrics_through_the_documented_nginx(
    deployed: tuple[EngineProcess, Nginx, CertificateAuthority],
) -> None:
    engine, nginx, ca = deployed
    admin = engine.login()
    through = Through(nginx, ca.pem)
    feed = through.connection()
    feed.request("GET", "/api/v1/events", headers={"Authorization": f"Bearer {admin}"})
    stream = feed.getresponse()
    assert stream.status == 200
    assert stream.headers["Content-Type"].startswith("text/event-stream")
    assert feed.sock is not None
    feed.sock.settimeout(20)  # every read below is bounded

    parser = EventParser()

    def next_event() -> tuple[str, dict[str, object]]:
        for line in stream:
            event = parser.feed(line)
            if event is not None:
                return event.kind, event.data
        raise AssertionError("the stream ended")

    try:
        assert next_event()[0] == "ready"
        # An event reaches the subscriber at once: nginx does not hold it back.
        assert put_flow(
            engine, admin, "quick", [{"id": "n", "code": "def process():\n    return 1\n"}]
        )
        run_id = start_run(engine, admin, "quick")["id"]
        seen: list[tuple[str, dict[str, object]]] = []
        while not any(k == "run.state" and d.get("state") == "succeeded" for k, d in seen):
            seen.append(next_event())
        assert all(d.get("run_id") == run_id for k, d in seen if k.startswith(("run.", "call.")))
    finally:
        feed.close()

    scrape = through.connection()
    try:
        scrape.request("GET", "/metrics", headers={"Authorization": f"Bearer {admin}"})
        answer = scrape.getresponse()
        assert answer.status == 200
        samples = [
            (sample.labels, sample.value)
            for family in text_string_to_metric_families(answer.read().decode())
            for sample in family.samples
            if sample.name == "fluksio_node_calls_total"
        ]
        assert samples == [({"place": "engine", "outcome": "succeeded"}, 1.0)]
    finally:
        scrape.close()
