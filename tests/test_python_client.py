"""``fluksio.client.Client`` against a real engine in its own process, as a script uses it.

A script logs in (a password, a token, or the environment), puts a flow, starts a run,
waits for it and reads its result and output; a refusal is an exception with the
engine's status and sentence; an engine out of reach is one sentence; artifacts go up and
come back checked against their digest; the live feed goes on after the last event seen;
worker tokens are minted, listed and revoked; an HTTPS engine is trusted through a CA file.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from pydantic import ValidationError

from fluksio.client import Client, ClientError, EngineRefused, ReceivedEvent
from fluksio.wire.flows import NodeSpec, RetryPolicy
from tests.support.certs import CertificateAuthority
from tests.support.client import SUPERUSER, SUPERUSER_PASSWORD
from tests.support.engine import EngineProcess, free_port, start_engine
from tests.support.runs import code, says_run_succeeded
from tests.support.wait import wait_for

pytestmark = pytest.mark.process
Result = TypeVar("Result")

PRINTS_AND_ADDS = code("""
    def process(a, b):
        print("adding", a, "and", b)
        return a + b
""")


@pytest.fixture
def engine(shared_engine: EngineProcess) -> EngineProcess:
    return shared_engine


@pytest.fixture
def client(engine: EngineProcess) -> Client:
    logged_in = Client(engine.url)
    logged_in.login(SUPERUSER, SUPERUSER_PASSWORD)
    return logged_in


def test_a_script_runs_a_flow_and_reads_its_result_and_output(client: Client) -> None:
    saved = client.put_flow("add", [{"id": "add", "code": PRINTS_AND_ADDS}])
    assert [node["id"] for node in saved.nodes] == ["add"]
    started = client.start_run("add", {"a": 2, "b": 40})
    run = client.wait_run(started.id, timeout=60)
    assert (run.state, run.nodes[0].result) == ("succeeded", 42)
    assert client.logs(run.id).lines == ["adding 2 and 40"]
    assert started.id in [summary.id for summary in client.runs(flow="add")]


def test_a_flow_of_typed_nodes_is_checked_as_it_is_written_and_runs(client: Client) -> None:
    bad = {"id": "add", "code": PRINTS_AND_ADDS, "retry": {"on": ["Sometimes"], "times": 1}}
    with pytest.raises(ValidationError, match=r"retry\.on\.0"):
        NodeSpec.model_validate(bad)
    node = NodeSpec(id="add", code=PRINTS_AND_ADDS, retry=RetryPolicy(on=["NodeError"], times=2))
    saved = client.put_flow("typed", [node])
    # One shape from the script to the store: the engine keeps the node the model made.
    assert saved.nodes == [node.model_dump(mode="json")]
    run = client.wait_run(client.start_run("typed", {"a": 1, "b": 2}).id, timeout=60)
    assert (run.state, run.nodes[0].result) == ("succeeded", 3)


def test_a_superusers_script_keeps_secrets_whose_values_never_come_back(client: Client) -> None:
    stored = client.put_secret("db-password", "hunter2-but-longer", ["gpu"])
    assert (stored.name, stored.labels) == ("db-password", ["gpu"])
    listed = {secret.name: secret for secret in client.secrets()}
    assert "db-password" in listed
    assert "hunter2" not in listed["db-password"].model_dump_json()
    assert client.delete_secret("db-password").deleted == "db-password"
    assert "db-password" not in {secret.name for secret in client.secrets()}


def test_credentials_come_from_the_environment(
    engine: EngineProcess, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FLUKSIO_TOKEN", raising=False)
    monkeypatch.setenv("FLUKSIO_USERNAME", SUPERUSER)
    monkeypatch.setenv("FLUKSIO_PASSWORD", SUPERUSER_PASSWORD)
    assert Client.from_environment(engine.url).health().status == "ok"
    monkeypatch.setenv("FLUKSIO_TOKEN", str(client.http.token))
    monkeypatch.delenv("FLUKSIO_PASSWORD")
    by_token = Client.from_environment(f"{engine.url}/api/v1")
    assert by_token.http.token == client.http.token
    assert isinstance(by_token.workers(), list)
    monkeypatch.delenv("FLUKSIO_TOKEN")
    with pytest.raises(ClientError, match="set FLUKSIO_TOKEN, or FLUKSIO_USERNAME and"):
        Client.from_environment(engine.url)


def test_a_refusal_carries_the_engines_status_and_sentence(
    engine: EngineProcess, client: Client
) -> None:
    with pytest.raises(EngineRefused) as bad_flow:
        client.put_flow("bad", [{"id": "n"}])
    assert bad_flow.value.status == 422
    assert "code" in bad_flow.value.engine_detail
    assert bad_flow.value.detail == f"the engine refused: {bad_flow.value.engine_detail}"
    with pytest.raises(EngineRefused) as missing:
        client.run("no-such-run")
    assert missing.value.status == 404
    with pytest.raises(EngineRefused) as anonymous:
        Client(engine.url).workers()
    assert anonymous.value.status == 401


def test_a_body_over_the_engines_limit_is_a_sentence_naming_it(client: Client) -> None:
    # The executor's map of 5,000 items met aiohttp's bare "Request Entity Too Large".
    source = "def process(item):\n    return item * item  # squares, as a sweep would\n"
    nodes: list[dict[str, object]] = [
        {"id": f"n{i}", "code": source, "params": {"item": i}} for i in range(9000)
    ]
    with pytest.raises(EngineRefused) as over:
        client.put_flow("too-big", nodes)
    assert over.value.status == 413
    assert over.value.engine_detail.startswith(
        "the request's body is over 1048576 bytes, the most the engine takes in one JSON body"
        " (fluksio serve --client-max-size moves it); send large data as an artifact"
    ), over.value.engine_detail


def test_an_engine_out_of_reach_is_one_sentence() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ClientError, match=f"cannot reach the engine at {url}/api/v1: "):
        Client(url).health()


def test_artifacts_go_up_and_come_back_checked(client: Client, tmp_path: Path) -> None:
    data = b"\x00weights\xff" * 10_000
    ref = client.put_artifact(data, name="w.bin")
    assert ref.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert (ref.size, ref.name) == (len(data), "w.bin")
    assert client.artifact(ref.digest) == data
    table = tmp_path / "table.csv"
    table.write_text("a,b\n1,2\n")
    from_file = client.put_artifact(table, media_type="text/csv")
    assert (from_file.name, from_file.media_type) == ("table.csv", "text/csv")
    never_stored = "sha256:" + hashlib.sha256(b"never stored").hexdigest()
    with pytest.raises(EngineRefused) as missing:
        client.artifact(never_stored)
    assert missing.value.status == 404


def test_the_live_feed_goes_on_after_the_last_event_seen(client: Client) -> None:
    client.put_flow("feed", [{"id": "one", "code": PRINTS_AND_ADDS}])

    def until_it_succeeds() -> list[ReceivedEvent]:
        feed = client.events(reconnects=0)
        assert next(feed).kind == "ready"  # open before the run starts: nothing is missed
        run = client.start_run("feed", {"a": 1, "b": 1})
        seen = []
        for event in feed:
            if event.id:
                seen.append(event)
            if says_run_succeeded(event.kind, event.data, run.id):
                return seen
        raise AssertionError("the feed ended")

    seen = _within(60, until_it_succeeds)
    assert len(seen) >= 3, [e.kind for e in seen]

    def after_the_first() -> list[ReceivedEvent]:
        # A script that stopped reading after the first event picks up with the second
        # (after the feed's own "ready", which says where it starts).
        resumed = client.events(last_id=seen[0].id, reconnects=0)
        news = (e for e in resumed if e.id and e.kind != "ready")
        return list(itertools.islice(news, len(seen) - 1))

    again = _within(60, after_the_first)
    assert [e.id for e in again] == [e.id for e in seen[1:]]


def _within(seconds: float, work: Callable[[], Result]) -> Result:
    """``work``'s result, or a failure after ``seconds`` (a feed waits for ever)."""
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(work).result(timeout=seconds)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def test_worker_tokens_are_minted_listed_and_revoked(client: Client) -> None:
    minted = client.mint_worker_token("gpu-box", ["gpu"])
    assert minted.token and minted.labels == ["gpu"]
    assert minted.jti in [t.jti for t in client.worker_tokens()]
    assert client.revoke_worker_token(minted.jti).revoked_at is not None
    assert client.resources().queued == []


def test_an_https_engine_is_trusted_through_a_ca_file(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    pair = ca.issue("engine", ["127.0.0.1"])
    args = ("--tls-cert", str(pair.cert), "--tls-key", str(pair.key))
    engine = start_engine(tmp_path / "data", tmp_path / "logs", args=args, ca_file=str(ca.pem))
    try:
        assert engine.url.startswith("https://")
        assert Client(engine.url, ca_file=str(ca.pem)).health().status == "ok"
        with pytest.raises(ClientError, match="CERTIFICATE_VERIFY_FAILED"):
            Client(engine.url).health()
    finally:
        engine.stop()


def test_a_script_runs_on_a_personal_token_until_it_is_revoked(
    engine: EngineProcess, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    minted = client.mint_personal_token("nightly-report", days=7)
    monkeypatch.setenv("FLUKSIO_TOKEN", minted.token)
    script = Client.from_environment(engine.url)
    assert isinstance(script.runs(), list)
    assert [t.name for t in client.personal_tokens()] == ["nightly-report"]
    client.revoke_personal_token(minted.id)
    with pytest.raises(EngineRefused) as refused:
        script.runs()
    assert (refused.value.status, refused.value.engine_detail) == (
        401,
        "personal token 'nightly-report' is revoked",
    )


CTRL_C_SCRIPT = """
import os
import signal
from fluksio.client import Client

# A shell that starts the test run in the background (``make test &``) ignores SIGINT in
# it, and so in every process it starts: this script is the user's, at a terminal.
signal.signal(signal.SIGINT, signal.default_int_handler)


def sleeps(seconds):
    import time

    time.sleep(seconds)
    return "woke"


client = Client(os.environ["ENGINE_URL"], token=os.environ["FLUKSIO_TOKEN"])
with client.executor() as executor:
    future = executor.submit(sleeps, 300)
    print(future.run_id, flush=True)
    future.result()
"""


def test_a_ctrl_c_in_the_executor_cancels_its_calls_and_returns(
    engine: EngineProcess, client: Client, tmp_path: Path
) -> None:
    script = tmp_path / "interrupted.py"
    script.write_text(CTRL_C_SCRIPT)
    env = {**os.environ, "ENGINE_URL": engine.url, "FLUKSIO_TOKEN": str(client.http.token)}
    process = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )
    try:
        assert process.stdout is not None
        run_id = process.stdout.readline().strip()
        wait_for(lambda: client.run(run_id).state == "running", timeout=60, what="the call runs")
        process.send_signal(signal.SIGINT)  # one Ctrl-C
        assert process.wait(timeout=30) != 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    # Nothing it started is left running on the engine.
    assert client.wait_run(run_id, timeout=30).state == "cancelled"
