"""The engine's REST API as a test (or a benchmark) speaks it: one interface, two speeds.

:class:`EngineApi` is the interface: :meth:`~EngineApi.request` and :meth:`~EngineApi.
ws_connect` are all an implementation provides, and every helper a scenario uses (log in,
mint, put a flow, start a run and wait for it, attach a scripted worker) is written once
on top of them. A scenario written against it runs at either speed:

- :class:`~tests.support.inprocess.InProcessEngine`: the app in the test's own process
  behind pytest-aiohttp, for the engine's logic (the fast tier);
- :class:`SocketEngine`: a real socket to an engine in its own process (``fluksio serve``),
  for what only a process shows (signals, restarts, the packaged commands, TLS).

:class:`BlockingEngine` lends the same helpers to a synchronous test (one that drives
processes and waits on them): each call runs to its end over a :class:`SocketEngine`.

Paths are under ``/api/v1`` unless they start with ``//`` (``//metrics``: the site root).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from fluksio.agent.protocol.frames import ContainersReport
from fluksio.api.declare import API_PREFIX
from fluksio.wire.states import TERMINAL_RUN_STATES
from tests.support.netns import enter
from tests.support.scripted_worker import ScriptedWorker, hello_frame
from tests.support.wait import poll_async

__all__ = [
    "ENDED",
    "SUPERUSER",
    "SUPERUSER_PASSWORD",
    "BlockingEngine",
    "EngineApi",
    "Reply",
    "SocketEngine",
]

SUPERUSER = "admin"
SUPERUSER_PASSWORD = "correct-horse-battery"
"""The superuser every test engine is made with (``FLUKSIO_SUPERUSER``, or in-process)."""
ENDED: frozenset[str] = TERMINAL_RUN_STATES
Result = TypeVar("Result")


@dataclass(frozen=True)
class Reply:
    """One answer: its status, its body (parsed JSON, or the raw bytes), its headers."""

    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def detail(self) -> str:
        """A refusal's sentence (``detail``), or empty."""
        return str(self.body.get("detail")) if isinstance(self.body, dict) else ""


def url_path(path: str) -> str:
    """``/runs`` -> ``/api/v1/runs``; ``//metrics`` -> ``/metrics``."""
    return path[1:] if path.startswith("//") else f"{API_PREFIX}{path}"


async def reply_of(answer: aiohttp.ClientResponse) -> Reply:
    raw = await answer.read()
    headers = dict(answer.headers)
    if answer.content_type == "application/json" and raw:
        return Reply(answer.status, json.loads(raw), headers)
    return Reply(answer.status, raw, headers)


class EngineApi(ABC):
    """The engine's API; see the module docstring."""

    token: str = ""
    """The bearer token sent when a request names none (the superuser's, once logged in)."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        token: str | None = None,
        form: dict[str, str] | None = None,
        data: bytes | str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """``method path`` with the given body; every status is returned, none raised."""
        body: Any = form if form is not None else data
        return await self._send(
            method, url_path(path), json_body, body, self._headers(token, headers)
        )

    @abstractmethod
    async def _send(
        self, method: str, path: str, json_body: Any, body: Any, headers: dict[str, str]
    ) -> Reply:
        """One request to ``path`` (already under ``/api/v1``), as the implementation sends it."""

    @abstractmethod
    def _socket_to(self, path: str) -> tuple[aiohttp.ClientSession, str, ssl.SSLContext | bool]:
        """Where a WebSocket to ``path`` (under the site root) is opened: the session, the
        full URL, and how its TLS is verified."""

    async def ws_connect(
        self,
        path: str,
        headers: dict[str, str],
        *,
        params: dict[str, str] | None = None,
        max_msg_size: int = 4 << 20,
    ) -> aiohttp.ClientWebSocketResponse:
        """A WebSocket to ``path`` (the attach socket); ``params`` in its query, and the
        largest frame it reads (aiohttp's 4 MiB unless given; 0: any)."""
        session, url, verify = self._socket_to(url_path(path))
        return await session.ws_connect(
            url, headers=headers, params=params, max_msg_size=max_msg_size, ssl=verify
        )

    def _headers(self, token: str | None, headers: dict[str, str] | None) -> dict[str, str]:
        sent = dict(headers or {})
        bearer = self.token if token is None else token
        if bearer:
            sent.setdefault("Authorization", f"Bearer {bearer}")
        return sent

    async def login(self, username: str = SUPERUSER, password: str = SUPERUSER_PASSWORD) -> str:
        answer = await self.request(
            "POST", "/login/access-token", form={"username": username, "password": password}
        )
        assert answer.status == 200, answer
        return str(answer.body["access_token"])

    async def mint_token(self, name: str, labels: list[str]) -> dict[str, Any]:
        """A new worker token's whole answer (token, jti, name, labels, expires_at)."""
        answer = await self.request(
            "POST", "/workers/tokens", json_body={"name": name, "labels": labels}
        )
        assert answer.status == 201, answer
        body: dict[str, Any] = answer.body
        return body

    async def mint(self, name: str, labels: list[str]) -> str:
        """A new worker token's text."""
        return str((await self.mint_token(name, labels))["token"])

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

    async def wait_run(
        self, run_id: str, timeout: float = 20, *, states: frozenset[str] = ENDED
    ) -> dict[str, Any]:
        """The run once it is in one of ``states``, by default once it has ended (the
        engine holds each request up to 1 s until it does)."""

        async def reached() -> dict[str, Any] | None:
            body: dict[str, Any] = (await self.request("GET", f"/runs/{run_id}?wait=1")).body
            return body if body["state"] in states else None

        what = f"run {run_id} to reach {sorted(states)}"
        # A request held on a manual clock ends only with the run: bound it here too.
        async with asyncio.timeout(timeout + 1):
            return await poll_async(reached, timeout=timeout, what=what)

    async def first_queued_reason(self) -> str | None:
        """Why the first call in line waits (``GET /workers/resources``), if one does."""
        queued = (await self.request("GET", "/workers/resources")).body["queued"]
        return str(queued[0]["reason"]) if queued else None

    async def worker_status(self, name: str) -> str | None:
        """The attached worker's status (``idle``, ``busy``, ``not answering``), if listed."""
        found = [w for w in (await self.request("GET", "/workers")).body if w["name"] == name]
        return str(found[0]["status"]) if found else None

    async def seen_silent(self, name: str) -> None:
        """Wait until the watch has looked since the clock moved and says the worker stopped
        answering."""

        async def silent() -> bool:
            return await self.worker_status(name) == "not answering"

        await poll_async(silent, timeout=10, what=f"{name} to be seen silent")

    async def attach(
        self,
        token: str,
        *,
        name: str,
        labels: list[str] | None = None,
        parallel: int = 1,
        protocol: int | None = None,
        host: str | None = None,
        slurm_job_id: str | None = None,
        ends_at: float | None = None,
        relayed: bool = False,
        resume: list[str] | None = None,
        containers: ContainersReport | None = None,
        instance: str | None = None,
        published: bool = False,
        **inventory: int,
    ) -> ScriptedWorker:
        """A worker the test drives, attached with ``token`` (see :class:`ScriptedWorker`);
        ``published``: its hello is the published agent's (it names no version)."""
        socket = await self.ws_connect(
            "/workers/attach", headers={"Authorization": f"Bearer {token}"}
        )
        worker = ScriptedWorker(socket)
        hello = hello_frame(
            name,
            labels or [],
            parallel=parallel,
            protocol=protocol,
            host=host,
            slurm_job_id=slurm_job_id,
            ends_at=ends_at,
            inventory=inventory,
            relayed=relayed,
            resume=resume,
            containers=containers,
            instance=instance,
            version=None if published else "test",
        )
        await socket.send_str(hello)
        worker.greeting = json.loads((await socket.receive(timeout=5)).data)
        if worker.greeting.get("op") == "welcome":
            worker.start()
        return worker


class SocketEngine(EngineApi):
    """The API of an engine in its own process, over a real socket (one keep-alive pool).

    ``base`` is the engine's URL (``http://127.0.0.1:PORT``); ``ca_file`` the CA an
    ``https://`` engine is verified against. Close it (or use ``async with``).
    """

    def __init__(self, base: str, *, token: str = "", ca_file: str | None = None) -> None:
        self.base = base.rstrip("/")
        self.token = token
        # Made here, not aiohttp's context made at its import: a test trusts its private
        # CA through SSL_CERT_FILE, which the default context reads when it is made.
        self._ssl = ssl.create_default_context(cafile=ca_file)
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        return self._session

    async def _send(
        self, method: str, path: str, json_body: Any, body: Any, headers: dict[str, str]
    ) -> Reply:
        url = f"{self.base}{path}"
        async with self.session.request(
            method, url, json=json_body, data=body, headers=headers, ssl=self._ssl
        ) as answer:
            return await reply_of(answer)

    def _socket_to(self, path: str) -> tuple[aiohttp.ClientSession, str, ssl.SSLContext | bool]:
        return self.session, f"{self.base}{path}", self._ssl

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> SocketEngine:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


class BlockingEngine:
    """:class:`EngineApi`'s helpers for a synchronous test, over a :class:`SocketEngine`.

    Each call opens a connection, runs to its end on an event loop of its own (on a thread
    of its own), and closes: nothing is left open between calls (a synchronous test has no
    loop to keep one on).
    """

    def __init__(
        self, base: str, *, token: str = "", ca_file: str | None = None, netns: str | None = None
    ) -> None:
        self.base = base
        self.token = token
        self.ca_file = ca_file
        self.netns = netns
        """A network namespace the calls are made from (an engine behind an air gap)."""

    def _run(self, use: Callable[[SocketEngine], Awaitable[Result]]) -> Result:
        async def once() -> Result:
            if self.netns is not None:
                enter(self.netns)  # this thread only: it was made for this call
            async with SocketEngine(self.base, token=self.token, ca_file=self.ca_file) as api:
                return await use(api)

        # On a thread of its own: the caller's thread may already run an event loop
        # (Playwright's synchronous API keeps one), where asyncio.run is refused.
        with ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, once()).result()

    def using(self, use: Callable[[SocketEngine], Awaitable[Result]]) -> Result:
        """``use`` run to its end with a :class:`SocketEngine` of this engine (for what
        the helpers below do not cover: a hand-made socket)."""
        return self._run(use)

    def request(self, method: str, path: str, **options: Any) -> Reply:
        """:meth:`EngineApi.request`, waited for: the same keyword options."""
        return self._run(lambda api: api.request(method, path, **options))

    def login(self, username: str = SUPERUSER, password: str = SUPERUSER_PASSWORD) -> str:
        return self._run(lambda api: api.login(username, password))

    def mint_token(self, name: str, labels: list[str]) -> dict[str, Any]:
        return self._run(lambda api: api.mint_token(name, labels))

    def put_flow(self, name: str, nodes: list[dict[str, Any]]) -> Reply:
        return self._run(lambda api: api.put_flow(name, nodes))

    def start_run(self, flow: str, **params: Any) -> dict[str, Any]:
        return self._run(lambda api: api.start_run(flow, **params))

    def run(self, run_id: str) -> dict[str, Any]:
        return self._run(lambda api: api.run(run_id))

    def wait_run(
        self, run_id: str, timeout: float = 30, *, states: frozenset[str] = ENDED
    ) -> dict[str, Any]:
        return self._run(lambda api: api.wait_run(run_id, timeout, states=states))
