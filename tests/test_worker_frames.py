"""Random and oversized frames from an attached worker never crash the engine or leak a call.

A hand-driven client attaches as a worker, receives a real call, then sends what
hypothesis makes up. Whatever it sends, the engine keeps serving, and once the client is
gone the call has ended (answered, or failed as gone), never left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.client import SocketEngine
from tests.support.engine import EngineProcess, start_engine
from tests.support.wait import wait_for

pytestmark = pytest.mark.process

MAX_FRAME = 4096
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def frames(call_id: str) -> st.SearchStrategy[str | bytes]:
    about_the_call = st.fixed_dictionaries(
        {"call_id": st.sampled_from([call_id, "unknown", ""])},
        optional={
            "event": st.sampled_from(["heartbeat", "emit", "yield", "bogus"]) | json_values,
            "ok": st.booleans() | json_values,
            "result": json_values,
            "error": json_values,
            "outputs": json_values,
            "logs": st.text(max_size=50) | json_values,
        },
    ).map(json.dumps)
    return st.one_of(
        about_the_call,
        json_values.map(json.dumps),
        st.text(max_size=200),
        st.binary(max_size=64),
        st.just("x" * (MAX_FRAME + 100)),  # over the engine's frame limit
    )


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    root = tmp_path_factory.mktemp("fuzz")
    process = start_engine(root / "data", root / "logs", args=("--max-frame-bytes", str(MAX_FRAME)))
    yield process
    process.stop()


@pytest.fixture(scope="module")
def setup(engine: EngineProcess) -> dict[str, str]:
    admin = engine.login()
    token = engine.mint(admin, "fuzzer", ["fuzz"])["token"]
    engine.client(admin).request(
        "PUT",
        "/flows/fuzz",
        json_body={
            "nodes": [{"id": "target", "worker": "fuzz", "code": "def process():\n    return 1\n"}]
        },
    )
    return {"admin": admin, "token": token}


async def _session(engine: EngineProcess, token: str, data: st.DataObject) -> None:
    bearer = {"Authorization": f"Bearer {token}"}
    async with (
        SocketEngine(engine.url) as api,
        await api.ws_connect("/workers/attach", bearer, max_msg_size=0) as ws,
    ):
        await ws.send_str(
            json.dumps(
                {
                    "op": "hello",
                    "protocol": 2,
                    "name": "fuzz",
                    "labels": ["fuzz"],
                    "max_parallel": 1,
                }
            )
        )
        welcome = json.loads((await ws.receive(timeout=10)).data)
        assert welcome["op"] == "welcome"
        run_frame = json.loads((await ws.receive(timeout=10)).data)
        assert run_frame["op"] == "run"
        for frame in data.draw(st.lists(frames(run_frame["call_id"]), min_size=1, max_size=6)):
            if ws.closed:
                break
            if isinstance(frame, bytes):
                await ws.send_bytes(frame)
            else:
                await ws.send_str(frame)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_garbage_from_a_worker_never_crashes_the_engine_or_leaks_a_call(
    engine: EngineProcess, setup: dict[str, str], data: st.DataObject
) -> None:
    admin = setup["admin"]
    run = engine.client(admin).request("POST", "/flows/fuzz/runs", json_body={}).body
    # The engine may close the socket under our feet: that is allowed.
    with contextlib.suppress(aiohttp.ClientError, ConnectionError):
        asyncio.run(asyncio.wait_for(_session(engine, setup["token"], data), 20))

    def ended_run() -> dict[str, Any] | None:
        found: dict[str, Any] = engine.client(admin).request("GET", f"/runs/{run['id']}").body
        return found if found["state"] in {"succeeded", "failed"} else None

    ended = wait_for(
        ended_run,
        timeout=10,
        what="the call to end once the worker is gone",
    )
    assert ended["nodes"][0]["state"] in {"succeeded", "failed"}
    assert engine.client().request("GET", "/health").status == 200
    assert engine.process.poll() is None


def test_an_oversized_frame_closes_the_socket(engine: EngineProcess, setup: dict[str, str]) -> None:
    """A guard against a fuzz test that exercises nothing: the closing path really closes."""

    async def oversized() -> aiohttp.WSMsgType:
        bearer = {"Authorization": f"Bearer {setup['token']}"}
        async with (
            SocketEngine(engine.url) as api,
            await api.ws_connect("/workers/attach", bearer) as ws,
        ):
            await ws.send_str(
                json.dumps({"op": "hello", "protocol": 2, "name": "fuzz2", "labels": ["fuzz"]})
            )
            await ws.receive(timeout=10)
            await ws.send_str("{" + " " * MAX_FRAME + "}")
            closing = await ws.receive(timeout=10)
            return closing.type

    assert asyncio.run(oversized()) in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
