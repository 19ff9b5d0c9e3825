"""``Client``: the engine's API from Python, typed.

Every answer is read with the model the engine made it from (``fluksio.api.answers``,
the models the OpenAPI document is made from), so a field renamed on one side fails the
type check on the other, and an answer of another version is one sentence. A refusal is
:class:`~fluksio.client.http.EngineRefused`, carrying the engine's ``detail``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from fluksio.api.answers.flows import FlowBody, FlowSummary
from fluksio.api.answers.resources import ArtifactRef, Deleted, Health
from fluksio.api.answers.runs import NodeLogs, RunBody, RunSummary
from fluksio.api.answers.tokens import (
    MintedPersonalToken,
    MintedScrapeToken,
    MintedToken,
    PersonalTokenBody,
    ScrapeTokenBody,
    WorkerTokenBody,
)
from fluksio.api.answers.workers import RefusedWorkerBody, ResourcesBody, WorkerBody, WorkerList
from fluksio.client.http import ClientError, EngineRefused, Http
from fluksio.client.sse import ReceivedEvent
from fluksio.engine.runs.states import TERMINAL_RUN_STATES

if TYPE_CHECKING:
    from fluksio.client.executor import RemoteExecutor

__all__ = ["Client"]

Shaped = TypeVar("Shaped")
Model = TypeVar("Model", bound=BaseModel)
LONGEST_WAIT_S = 60
"""The longest an engine holds one answer (``?wait=``); longer waits ask again."""
FEED_RECONNECTS = 5
"""How many times in a row a dropped live feed is opened again before giving up."""
FEED_RECONNECT_S = 1.0


class Client:
    """The API of the engine at ``url`` (``http://host:8080``, with or without ``/api/v1``).

    ``token``: a bearer token (a login's, or a personal one); else call :meth:`login`, or
    build it with :meth:`from_environment`. ``ca_file``: the CA an ``https`` engine's
    certificate is verified against (default: the system's).
    """

    def __init__(self, url: str, *, token: str | None = None, ca_file: str | None = None):
        base = url.rstrip("/")
        if not base.endswith("/api/v1"):
            base += "/api/v1"
        self.http = Http(base, token, ca_file)

    @classmethod
    def from_environment(cls, url: str, *, ca_file: str | None = None) -> Client:
        """A client with ``$FLUKSIO_TOKEN``, or logged in as ``$FLUKSIO_USERNAME`` with
        ``$FLUKSIO_PASSWORD``: credentials from the environment, never from argv."""
        client = cls(url, token=os.environ.get("FLUKSIO_TOKEN") or None, ca_file=ca_file)
        if client.http.token:
            return client
        username = os.environ.get("FLUKSIO_USERNAME")
        password = os.environ.get("FLUKSIO_PASSWORD")
        if not (username and password):
            raise ClientError(
                "set FLUKSIO_TOKEN, or FLUKSIO_USERNAME and FLUKSIO_PASSWORD, to talk to the engine"
            )
        client.login(username, password)
        return client

    @property
    def base_url(self) -> str:
        return self.http.base_url

    def login(self, username: str, password: str) -> None:
        """Log in: the client holds the access token the engine gives."""
        answer = self.http.form("/login/access-token", {"username": username, "password": password})
        self.http.token = str(answer["access_token"])

    def read(
        self,
        model: type[Model],
        method: str,
        path: str,
        body: object | None = None,
        **query: Any,
    ) -> Model:
        """The engine's answer to ``method path`` as ``model`` (for what has no method)."""
        return _shaped(
            model.model_validate, self.http.json(method, path, body, query), method, path
        )

    def _list(self, model: type[Model], path: str, **query: Any) -> list[Model]:
        adapter: TypeAdapter[list[Model]] = _list_of(model)
        return _shaped(
            adapter.validate_python, self.http.json("GET", path, None, query), "GET", path
        )

    # -- the engine ------------------------------------------------------------------------

    def health(self) -> Health:
        return self.read(Health, "GET", "/health")

    # -- flows and runs --------------------------------------------------------------------

    def put_flow(self, name: str, nodes: list[dict[str, Any]]) -> FlowBody:
        """Create or replace flow ``name`` (each node a dict as ``PUT /flows/{name}`` takes)."""
        return self.read(FlowBody, "PUT", f"/flows/{name}", {"nodes": nodes})

    def flow(self, name: str) -> FlowBody:
        return self.read(FlowBody, "GET", f"/flows/{name}")

    def flows(self) -> list[FlowSummary]:
        return self._list(FlowSummary, "/flows")

    def delete_flow(self, name: str) -> Deleted:
        return self.read(Deleted, "DELETE", f"/flows/{name}")

    def start_run(self, flow: str, params: dict[str, Any] | None = None) -> RunBody:
        """Start a run of ``flow``; ``params`` as its nodes read them."""
        return self.read(RunBody, "POST", f"/flows/{flow}/runs", {"params": params or {}})

    def run(self, run_id: str) -> RunBody:
        return self.read(RunBody, "GET", f"/runs/{run_id}")

    def wait_run(self, run_id: str, timeout: float | None = None) -> RunBody:
        """The run once it has ended, or as it stands after ``timeout`` seconds (None:
        however long it takes). The engine holds each answer until the end or a minute."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = LONGEST_WAIT_S if deadline is None else deadline - time.monotonic()
            wait = max(0, min(LONGEST_WAIT_S, int(left)))
            run = self.read(RunBody, "GET", f"/runs/{run_id}", wait=wait or None)
            if run.state in TERMINAL_RUN_STATES or wait == 0:
                return run

    def cancel_run(self, run_id: str, *, wait: int = 0) -> RunBody:
        """Cancel a run; ``wait``: hold the answer up to that many seconds (at most 60)
        until what it executes has been stopped."""
        return self.read(RunBody, "POST", f"/runs/{run_id}/cancel", wait=wait or None)

    def delete_run(self, run_id: str) -> Deleted:
        """Delete an ended run (its artifacts go once nothing kept refers to them)."""
        return self.read(Deleted, "DELETE", f"/runs/{run_id}")

    def runs(
        self, *, flow: str | None = None, state: str | None = None, limit: int | None = None
    ) -> list[RunSummary]:
        return self._list(RunSummary, "/runs", flow=flow, state=state, limit=limit)

    def logs(
        self,
        run_id: str,
        node: str | None = None,
        *,
        start: int = 0,
        attempt: int | None = None,
        wait: int = 0,
    ) -> NodeLogs:
        """A node's output lines from position ``start`` (the last answer's ``next``), of
        its latest attempt or ``attempt``; ``wait``: hold the answer up to that many
        seconds until there is a line."""
        query = {"node": node, "from": start or None, "attempt": attempt, "wait": wait or None}
        return self.read(NodeLogs, "GET", f"/runs/{run_id}/logs", **query)

    # -- the live feed ---------------------------------------------------------------------

    def events(
        self,
        *,
        run: str | None = None,
        last_id: str | None = None,
        reconnects: int = FEED_RECONNECTS,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[ReceivedEvent]:
        """The live feed (``GET /events``), for ever: a connection that drops (or that the
        engine ends, restarting) is opened again from the last event seen, so no event is
        lost or repeated in between; after ``reconnects`` failures in a row, the last one
        is raised. ``run``: only that run's events; ``last_id``: go on after that event;
        ``stop``: asked at each line the engine sends (a keepalive every 15 s), and the
        feed ends once it is true."""
        failures = 0
        path = "/events" + (f"?run={run}" if run else "")
        while stop is None or not stop():
            try:
                for event in self.http.events(path, last_id, stop):
                    failures = 0
                    if event.id:
                        last_id = event.id
                    yield event
                ended = ClientError("the engine closed the live feed")
            except EngineRefused:
                raise  # opening it again would be refused again
            except ClientError as gone:
                ended = gone
            if stop is not None and stop():
                return
            failures += 1
            if failures > reconnects:
                raise ended
            time.sleep(FEED_RECONNECT_S)

    # -- Python functions as nodes ----------------------------------------------------------

    def executor(
        self,
        *,
        worker: str | None = None,
        policy: Literal["require", "prefer"] = "require",
        resources: dict[str, int] | None = None,
        limit: float | None = None,
        timeout: float = 0.0,
        retries: int = 0,
        imports: Sequence[str] = (),
    ) -> RemoteExecutor:
        """A ``concurrent.futures.Executor`` whose calls run as nodes placed as given:
        ``worker`` (a label) with ``policy``, ``resources`` (``cpus``, ``gpus``,
        ``ram_mb``), ``limit`` (seconds it may run), ``timeout`` (seconds it may stay
        silent), ``retries`` (after a lost worker); ``imports``: modules the functions use,
        as ``"numpy as np"`` or ``"from math import sqrt"``. See docs/python.md."""
        node: dict[str, Any] = {"worker_policy": policy, "retries": retries}
        if worker is not None:
            node["worker"] = worker
        if resources:
            node["resources"] = dict(resources)
        if limit is not None:
            node["limit"] = limit
        if timeout:
            node["timeout"] = timeout
        # Loaded when first asked for: a command that only reads answers need not pay for
        # reading functions' source (ast, inspect) and futures.
        executor: type[RemoteExecutor] = importlib.import_module(
            "fluksio.client.executor"
        ).RemoteExecutor
        return executor(self, node, imports)

    # -- artifacts -------------------------------------------------------------------------

    def put_artifact(
        self, data: bytes | Path, *, name: str = "", media_type: str | None = None
    ) -> ArtifactRef:
        """Store ``data`` (bytes, or a file's) as an artifact; its reference names it."""
        if isinstance(data, Path):
            name = name or data.name
            data = data.read_bytes()
        query = {"name": name or None, "media_type": media_type}
        answer = self.http.upload("/artifacts", data, query)
        return _shaped(ArtifactRef.model_validate, answer, "PUT", "/artifacts")

    def artifact(self, digest: str) -> bytes:
        """An artifact's bytes, checked against ``digest`` (``sha256:<hex>``)."""
        data = self.http.send("GET", f"/artifacts/{digest}")
        got = "sha256:" + hashlib.sha256(data).hexdigest()
        if got != digest:
            raise ClientError(f"artifact {digest} arrived as {got}: not the bytes stored")
        return data

    # -- workers ---------------------------------------------------------------------------

    def workers(self) -> list[WorkerBody | RefusedWorkerBody]:
        """Every attached worker, and those refused for their protocol."""
        return self.read(WorkerList, "GET", "/workers").root

    def resources(self) -> ResourcesBody:
        """Places, what is free, the queue with each call's reason, the provisioners."""
        return self.read(ResourcesBody, "GET", "/workers/resources")

    def mint_worker_token(self, name: str, labels: list[str]) -> MintedToken:
        return self.read(MintedToken, "POST", "/workers/tokens", {"name": name, "labels": labels})

    def worker_tokens(self) -> list[WorkerTokenBody]:
        return self._list(WorkerTokenBody, "/workers/tokens")

    def revoke_worker_token(self, jti: str) -> WorkerTokenBody:
        """Revoke a worker token: its workers are disconnected at once."""
        return self.read(WorkerTokenBody, "POST", f"/workers/tokens/{jti}/revoke")

    # -- personal API tokens ----------------------------------------------------------------

    def mint_personal_token(self, name: str, *, days: int = 90) -> MintedPersonalToken:
        """A token for your scripts (``$FLUKSIO_TOKEN``), valid ``days``; its text is in
        this answer only."""
        return self.read(MintedPersonalToken, "POST", "/tokens", {"name": name, "days": days})

    def personal_tokens(self) -> list[PersonalTokenBody]:
        return self._list(PersonalTokenBody, "/tokens")

    def revoke_personal_token(self, token_id: str) -> PersonalTokenBody:
        """Revoke one of your tokens: refused from its next request on."""
        return self.read(PersonalTokenBody, "POST", f"/tokens/{token_id}/revoke")

    # -- metrics ---------------------------------------------------------------------------

    def mint_scrape_token(self, name: str) -> MintedScrapeToken:
        """A token that reads ``/metrics`` and nothing else (for Prometheus)."""
        return self.read(MintedScrapeToken, "POST", "/metrics/tokens", {"name": name})

    def scrape_tokens(self) -> list[ScrapeTokenBody]:
        return self._list(ScrapeTokenBody, "/metrics/tokens")

    def revoke_scrape_token(self, token_id: str) -> ScrapeTokenBody:
        return self.read(ScrapeTokenBody, "POST", f"/metrics/tokens/{token_id}/revoke")


@functools.cache
def _list_of(model: type[BaseModel]) -> TypeAdapter[Any]:
    """A list of ``model``'s validator, built once (building one costs milliseconds)."""
    return TypeAdapter(list[model])  # type: ignore[valid-type]


def _shaped(validate: Callable[[Any], Shaped], answer: Any, method: str, path: str) -> Shaped:
    try:
        return validate(answer)
    except ValidationError as exc:
        raise ClientError(
            f"the engine answered {method} {path} in a shape this fluksio does not know"
            f" ({exc.error_count()} problem(s)): are the engine and this client the same"
            " version?"
        ) from None
