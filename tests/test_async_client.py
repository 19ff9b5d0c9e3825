"""``fluksio.client.AsyncClient`` against a real engine in its own process, as an asyncio
program uses it: the blocking client's methods and answers, awaited, and runs in flight
side by side on one loop."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from fluksio.client import AsyncClient, Client, ClientError, EngineRefused, ReceivedEvent
from fluksio.client.errors import Unreachable
from tests.support.certs import CertificateAuthority
from tests.support.client import SUPERUSER, SUPERUSER_PASSWORD
from tests.support.engine import EngineProcess, free_port, start_engine
from tests.support.runs import code, says_run_succeeded

ADDS = code("""
    def process(a, b):
        print("adding", a, "and", b)
        return a + b
""")
WITHIN_S = 60


@pytest.fixture
async def client(shared_engine: EngineProcess) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(shared_engine.url) as logged_in:
        await logged_in.login(SUPERUSER, SUPERUSER_PASSWORD)
        yield logged_in


@pytest.mark.process
async def test_runs_started_side_by_side_on_one_loop_each_end_with_their_result(
    client: AsyncClient,
) -> None:
    saved = await client.put_flow("add", [{"id": "add", "code": ADDS}])
    assert [node["id"] for node in saved.nodes] == ["add"]
    started = await asyncio.gather(*(client.start_run("add", {"a": i, "b": 1}) for i in range(5)))
    ended = await asyncio.wait_for(
        asyncio.gather(*(client.wait_run(run.id, timeout=WITHIN_S) for run in started)),
        WITHIN_S,
    )
    assert [(run.state, run.nodes[0].result) for run in ended] == [
        ("succeeded", i + 1) for i in range(5)
    ]
    assert (await client.logs(ended[2].id)).lines == ["adding 2 and 1"]
    assert {run.id for run in started} <= {summary.id for summary in await client.runs()}


@pytest.mark.process
async def test_a_refusal_and_an_engine_out_of_reach_are_the_blocking_clients_errors(
    client: AsyncClient,
) -> None:
    with pytest.raises(EngineRefused) as bad_flow:
        await client.put_flow("bad", [{"id": "n"}])
    assert bad_flow.value.status == 422
    assert "code" in bad_flow.value.engine_detail
    url = f"http://127.0.0.1:{free_port()}"
    async with AsyncClient(url) as nowhere:
        with pytest.raises(ClientError, match=f"cannot reach the engine at {url}/api/v1: "):
            await nowhere.health()
    # Refused, the request reached no engine: both clients say so (an executor's change
    # is sent again on that alone).
    async with AsyncClient(url) as nowhere:
        with pytest.raises(Unreachable) as refused:
            await nowhere.put_flow("f", [{"id": "n", "code": "def process():\n    pass\n"}])
    assert refused.value.unsent
    with pytest.raises(Unreachable) as blocked:
        Client(url).put_flow("f", [{"id": "n", "code": "def process():\n    pass\n"}])
    assert blocked.value.unsent


@pytest.mark.process
async def test_artifacts_go_up_and_come_back_checked(client: AsyncClient, tmp_path: Path) -> None:
    data = b"\x00weights\xff" * 10_000
    ref = await client.put_artifact(data, name="w.bin")
    assert ref.digest == "sha256:" + hashlib.sha256(data).hexdigest()
    assert await client.artifact(ref.digest) == data
    table = tmp_path / "table.csv"
    table.write_text("a,b\n1,2\n")
    assert (await client.put_artifact(table)).name == "table.csv"


@pytest.mark.process
async def test_the_live_feed_goes_on_after_the_last_event_seen(client: AsyncClient) -> None:
    await client.put_flow("feed", [{"id": "one", "code": ADDS}])

    async def until_it_succeeds() -> list[ReceivedEvent]:
        feed = client.events(reconnects=0)
        assert (await anext(feed)).kind == "ready"  # open before the run starts
        run = await client.start_run("feed", {"a": 1, "b": 1})
        seen = []
        async for event in feed:
            if event.id:
                seen.append(event)
            if says_run_succeeded(event.kind, event.data, run.id):
                await feed.aclose()
                return seen
        raise AssertionError("the feed ended")

    seen = await asyncio.wait_for(until_it_succeeds(), WITHIN_S)
    assert len(seen) >= 3, [e.kind for e in seen]

    async def after_the_first() -> list[ReceivedEvent]:
        news = []
        async for event in client.events(last_id=seen[0].id, reconnects=0):
            if event.id and event.kind != "ready":
                news.append(event)
            if len(news) == len(seen) - 1:
                return news
        raise AssertionError("the feed ended")

    again = await asyncio.wait_for(after_the_first(), WITHIN_S)
    assert [e.id for e in again] == [e.id for e in seen[1:]]


@pytest.mark.process
async def test_a_personal_token_from_the_environment_and_an_https_engine(
    client: AsyncClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    minted = await client.mint_personal_token("async-script", days=1)
    monkeypatch.setenv("FLUKSIO_TOKEN", minted.token)
    async with await AsyncClient.from_environment(client.base_url) as script:
        assert isinstance(await script.workers(), list)
        await client.revoke_personal_token(minted.id)
        with pytest.raises(EngineRefused, match="personal token 'async-script' is revoked"):
            await script.runs()

    ca = CertificateAuthority(tmp_path)
    pair = ca.issue("engine", ["127.0.0.1"])
    args = ("--tls-cert", str(pair.cert), "--tls-key", str(pair.key))
    engine = start_engine(tmp_path / "data", tmp_path / "logs", args=args, ca_file=str(ca.pem))
    try:
        async with AsyncClient(engine.url, ca_file=str(ca.pem)) as trusting:
            assert (await trusting.health()).status == "ok"
        async with AsyncClient(engine.url) as untrusting:
            with pytest.raises(ClientError, match="certificate verify failed"):
                await untrusting.health()
    finally:
        engine.stop()


def test_the_async_client_has_every_method_of_the_blocking_one_with_its_parameters() -> None:
    """A method added to one client only, or with other parameters, is caught here (the
    one-request methods are one definition; the others are written twice)."""
    blocking = {n: m for n, m in inspect.getmembers(Client) if not n.startswith("_")}
    awaited = {n: m for n, m in inspect.getmembers(AsyncClient) if not n.startswith("_")}
    assert set(blocking) - {"executor"} <= set(awaited)
    for name, method in blocking.items():
        if callable(method) and name != "executor":
            assert _parameters(method) == _parameters(awaited[name]), name
    assert inspect.iscoroutinefunction(AsyncClient.wait_run)
    assert inspect.isasyncgenfunction(AsyncClient.events)


def _parameters(method: object) -> list[tuple[str, object]]:
    build = getattr(method, "build", method)  # an Operation: the parameters it builds from
    signature = inspect.signature(build)  # type: ignore[arg-type]
    return [(p.name, p.default) for p in signature.parameters.values() if p.name != "self"]
