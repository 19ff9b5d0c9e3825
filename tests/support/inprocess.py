"""An engine in the test's own process: ``create_app(settings)`` behind pytest-aiohttp.

For the logic of the REST and WebSocket layers, the run machine and the dispatcher:
failures point at a line, and nothing waits for a process to start. What only a real
process shows (signals, restarts, the packaged commands) stays in the subprocess tests.

:class:`ScriptedWorker` is the far end of the attach socket, written by the test: it says
hello, and answers each ``run`` frame as the test tells it, so every ordering of frames
can be produced on demand.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient

from fluksio.agent.frames import (
    PROTOCOL,
    AnswerFrame,
    HelloFrame,
    InventoryReport,
    ProgressFrame,
    encode,
)
from fluksio.api import appkeys
from fluksio.api.app import create_app
from fluksio.clock import Clock
from fluksio.engine.provisioning import Configured
from fluksio.engine.settings import EngineSettings
from fluksio.engine.users import UserStore
from fluksio.provisioners.plugins import build_plugins
from tests.support.engine import SUPERUSER, SUPERUSER_PASSWORD
from tests.support.openapi_check import AnswerCheck, check_answers
from tests.support.wait import async_wait_for, poll_async

__all__ = ["InProcessEngine", "Reply", "ScriptedWorker", "start_in_process"]

ClientFactory = Callable[[web.Application], Awaitable[TestClient[Any, Any]]]


@dataclass
class Reply:
    """What a test answers to one call; awaiting :meth:`ScriptedWorker.call` returns it."""

    status: int
    body: Any
    """Parsed JSON, or the raw bytes of any other answer."""


class InProcessEngine:
    def __init__(
        self, client: TestClient[Any, Any], app: web.Application, answers: AnswerCheck
    ) -> None:
        self.client = client
        self.app = app
        self.answers = answers
        """Every answer is checked against the OpenAPI document; what was seen."""
        self.token = ""

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        token: str | None = None,
        form: dict[str, str] | None = None,
    ) -> Reply:
        headers = {}
        bearer = self.token if token is None else token
        if bearer:
            headers["Authorization"] = f"Bearer {bearer}"
        kwargs: dict[str, Any] = {"headers": headers}
        if json_body is not None:
            kwargs["json"] = json_body
        if form is not None:
            kwargs["data"] = form
        async with self.client.request(method, f"/api/v1{path}", **kwargs) as answer:
            raw = await answer.read()
            if answer.content_type == "application/json" and raw:
                return Reply(answer.status, json.loads(raw))
            return Reply(answer.status, raw)

    async def login(self, username: str = SUPERUSER, password: str = SUPERUSER_PASSWORD) -> str:
        answer = await self.request(
            "POST", "/login/access-token", form={"username": username, "password": password}
        )
        assert answer.status == 200, answer
        return str(answer.body["access_token"])

    async def mint(self, name: str, labels: list[str]) -> str:
        answer = await self.request(
            "POST", "/workers/tokens", json_body={"name": name, "labels": labels}
        )
        assert answer.status == 201, answer
        return str(answer.body["token"])

    async def put_flow(self, name: str, nodes: list[dict[str, Any]]) -> Reply:
        return await self.request("PUT", f"/flows/{name}", json_body={"nodes": nodes})

    async def start_run(self, flow: str, **params: Any) -> dict[str, Any]:
        answer = await self.request("POST", f"/flows/{flow}/runs", json_body={"params": params})
        assert answer.status == 201, answer
        body: dict[str, Any] = answer.body
        return body

    async def run(self, run_id: str) -> dict[str, Any]:
        body: dict[str, Any] = (await self.request("GET", f"/runs/{run_id}")).body
        return body

    async def wait_run(self, run_id: str, timeout: float = 20) -> dict[str, Any]:
        """The run once it has ended (the engine holds each request up to 1 s until then)."""

        async def ended() -> dict[str, Any] | None:
            body: dict[str, Any] = (await self.request("GET", f"/runs/{run_id}?wait=1")).body
            return body if body["state"] not in ("queued", "running") else None

        # A request held on a manual clock ends only with the run: bound it here too.
        async with asyncio.timeout(timeout + 1):
            return await poll_async(ended, timeout=timeout, what=f"run {run_id} to end")

    async def attach(
        self,
        token: str,
        *,
        name: str,
        labels: list[str] | None = None,
        parallel: int = 1,
        protocol: int = PROTOCOL,
        host: str | None = None,
        slurm_job_id: str | None = None,
        ends_at: float | None = None,
        **inventory: int,
    ) -> ScriptedWorker:
        socket = await self.client.ws_connect(
            "/api/v1/workers/attach", headers={"Authorization": f"Bearer {token}"}
        )
        worker = ScriptedWorker(socket)
        hello = HelloFrame(
            protocol=protocol,
            name=name,
            labels=labels or [],
            python="/usr/bin/python3",
            max_parallel=parallel,
            inventory=InventoryReport(**inventory),
            version="test",
            host=host,
            slurm_job_id=slurm_job_id,
            ends_at=ends_at,
        )
        await socket.send_str(encode(hello))
        worker.greeting = json.loads((await socket.receive(timeout=5)).data)
        if worker.greeting.get("op") == "welcome":
            worker.start()
        return worker


@dataclass
class ScriptedWorker:
    """The worker side of one attach socket, driven by the test."""

    socket: aiohttp.ClientWebSocketResponse
    greeting: dict[str, Any] = field(default_factory=dict)
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    _answered: set[str] = field(default_factory=set)
    _reader: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for message in self.socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            frame = json.loads(message.data)
            if frame.get("op") in ("run", "compile"):
                self.calls[frame["call_id"]] = frame
            elif frame.get("op") == "cancel":
                self.cancelled.append(frame["call_id"])

    async def next_call(self, timeout: float = 5) -> dict[str, Any]:
        """The first call sent here that the test has not answered yet."""
        answered = self._answered

        def pending() -> dict[str, Any] | None:
            return next((c for i, c in self.calls.items() if i not in answered), None)

        return await async_wait_for(pending, timeout=timeout, what="a call for the worker")

    async def answer(self, call_id: str, result: Any = None, *, ok: bool = True) -> None:
        self._answered.add(call_id)
        await self.socket.send_str(encode(AnswerFrame(call_id=call_id, ok=ok, result=result)))

    async def emit(self, call_id: str, outputs: dict[str, Any]) -> None:
        frame = ProgressFrame(call_id=call_id, event="emit", outputs=outputs, ts=1.0)
        await self.socket.send_str(encode(frame))

    async def freeze(self) -> None:
        """Stop reading, so nothing is answered, not even the engine's pings: a frozen host."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None

    def thaw(self) -> None:
        """Read again: pings waiting in the socket are answered, calls come through."""
        self.start()

    async def send_raw(self, text: str) -> None:
        await self.socket.send_str(text)

    async def close(self) -> None:
        await self.socket.close()
        if self._reader is not None:
            await self._reader


async def start_in_process(
    aiohttp_client: ClientFactory,
    data_dir: Path,
    *,
    provisioners: Configured | None = None,
    clock: Clock | None = None,
    **settings: Any,
) -> InProcessEngine:
    """An engine app on ``data_dir`` with the test superuser, logged in."""
    config = EngineSettings(data_dir=data_dir, engine_slots=4, **settings)
    configured = provisioners or Configured(build_plugins(), [])
    app = create_app(config, provisioners=configured, clock=clock)
    answers = check_answers(app)
    client = await aiohttp_client(app)
    UserStore(app[appkeys.DATABASE]).add(SUPERUSER, SUPERUSER_PASSWORD, is_superuser=True)
    engine = InProcessEngine(client, app, answers)
    engine.token = await engine.login()
    return engine
