"""``Client``: the engine's API from Python, typed, on the standard library's HTTP.

Its methods are :class:`~fluksio.client.operations.Operations` (each request written
once, shared with :class:`~fluksio.client.async_client.AsyncClient`), plus those that are
more than one request: waiting for a run, the live feed, the executor. A refusal is
:class:`~fluksio.client.errors.EngineRefused`, carrying the engine's ``detail``.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from fluksio.client.absence import RIDE_OVER_S, Absence, FeedPosition, ride_over_from_environment
from fluksio.client.bounds import Bounds
from fluksio.client.endpoint import Front
from fluksio.client.errors import ClientError, EngineRefused, Redirected
from fluksio.client.http import Http
from fluksio.client.operations import (
    Operations,
    api_url,
    credentials,
    executor_node,
    login_form,
    run_end,
)
from fluksio.client.request import Blocking, Request, Steps, json_request
from fluksio.client.sse import ReceivedEvent
from fluksio.wire.answers.runs import RunBody

if TYPE_CHECKING:
    from fluksio.client.executor import RemoteExecutor
    from fluksio.wire.flows import NodeSettings

__all__ = ["Client"]

Answer = TypeVar("Answer")
Model = TypeVar("Model", bound=BaseModel)


class Client(Front[Http], Operations, Blocking):
    """The API of the engine at ``url`` (``http://host:8080``, with or without ``/api/v1``).

    ``token``: a bearer token (a login's, or a personal one); else call :meth:`login`, or
    build it with :meth:`from_environment`. ``ca_file``: the CA an ``https`` engine's
    certificate is verified against (default: the system's). ``bounds``: how large and
    how slow an answer may be (:class:`~fluksio.client.bounds.Bounds`). ``ride_over_s``:
    how long what waits (``wait_run``, the feed, an executor's futures) carries on while
    the engine cannot be reached, restarting, before one sentence. Safe to share between
    threads (each keeps its own connection).
    """

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        token: str | None = None,
        ca_file: str | None = None,
        bounds: Bounds | None = None,
        ride_over_s: float = RIDE_OVER_S,
    ):
        urls = [url] if isinstance(url, str) else url
        super().__init__(Http([api_url(u) for u in urls], token, ca_file, bounds), ride_over_s)

    @classmethod
    def from_environment(cls, url: str | Sequence[str], *, ca_file: str | None = None) -> Client:
        """A client with ``$FLUKSIO_TOKEN``, or logged in as ``$FLUKSIO_USERNAME`` with
        ``$FLUKSIO_PASSWORD``: credentials from the environment, never from argv; and
        ``$FLUKSIO_RIDE_OVER_S`` as its ``ride_over_s``, if set."""
        name_or_token, password = credentials()
        ride_over_s = ride_over_from_environment()
        if password is None:
            return cls(url, token=name_or_token, ca_file=ca_file, ride_over_s=ride_over_s)
        client = cls(url, ca_file=ca_file, ride_over_s=ride_over_s)
        client.login(name_or_token, password)
        return client

    def send(self, request: Request[Answer]) -> Answer:
        """``request`` sent, and its answer read; of several engines, to the next while
        one is a standby or refuses the connection."""
        for tried in itertools.count():
            try:
                raw = self.http.send(*request.line, large=request.large)
            except ClientError as failed:
                self.http.switch_after(failed, tried)  # or raises it
            else:
                return request.decode(raw)
        raise AssertionError("unreachable: a try returns or raises")

    def drive(self, steps: Steps[Answer], *, riding: bool = False) -> Answer:
        """An operation of several requests, each sent in turn; ``riding``: each asked
        again while the engine is away, for up to ``ride_over_s``."""
        try:
            request = next(steps)
            while True:
                if riding:
                    request = steps.send(self.riding(functools.partial(self.send, request)))
                else:
                    request = steps.send(self.send(request))
        except StopIteration as done:
            answer: Answer = done.value
            return answer

    def riding(self, read: Callable[[], Answer]) -> Answer:
        """``read()``, asked again while the engine cannot be reached (restarting, say),
        for up to ``ride_over_s``; then one sentence. For reads only: a request that
        changes something may have been done when its answer was lost."""
        return self._asked_again(read, unsent_only=False)

    def unsent_again(self, change: Callable[[], Answer]) -> Answer:
        """``change()``, sent again while the engine refuses connections (restarting,
        say), for up to ``ride_over_s``: a request refused before it reached an engine
        was not done, so sending it again cannot do it twice. A connection that broke
        off after it was sent is said at once (it may have been done)."""
        return self._asked_again(change, unsent_only=True)

    def _asked_again(self, ask: Callable[[], Answer], *, unsent_only: bool) -> Answer:
        absence = Absence(self.ride_over_s)
        while True:
            try:
                return ask()
            except ClientError as lost:
                time.sleep(absence.lost(lost, time.monotonic(), unsent_only=unsent_only))

    def login(self, username: str, password: str) -> None:
        """Log in: the client holds the access token the engine gives."""
        self.http.token = self.send(login_form(username, password))

    def read(
        self, model: type[Model], method: str, path: str, body: object | None = None, **query: Any
    ) -> Model:
        """The engine's answer to ``method path`` as ``model`` (for what has no method)."""
        answer: Model = self.send(json_request(model, method, path, body, **query))
        return answer

    def wait_run(self, run_id: str, timeout: float | None = None) -> RunBody:
        """The run once it has ended, or as it stands after ``timeout`` seconds (None:
        however long it takes); over an engine's restart, for up to ``ride_over_s``."""
        return self.drive(run_end(run_id, timeout), riding=True)

    # -- the live feed ---------------------------------------------------------------------

    def events(
        self,
        *,
        run: str | None = None,
        last_id: str | None = None,
        reconnects: int | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[ReceivedEvent]:
        """The live feed (``GET /events``), for ever: a connection that drops (or that the
        engine ends, restarting) is opened again from the last event seen, so no event is
        lost or repeated in between (an engine that restarted says ``refetch``: what it
        had told is gone with it, read again what you show); it gives up once the engine
        has been away ``ride_over_s``, or, given ``reconnects``, after that many failures
        in a row. ``run``: only that run's events; ``last_id``: go on after that event;
        ``stop``: asked at each line the engine sends (a keepalive every 15 s), and the
        feed ends once it is true."""
        position = FeedPosition(run, last_id, reconnects, Absence(self.ride_over_s))
        while stop is None or not stop():
            try:
                for event in self.http.events(position.path, position.last_id, stop):
                    position.seen(event)
                    yield event
                ended = ClientError("the engine closed the live feed")
            except (EngineRefused, Redirected):
                raise  # opening it again would be refused (or redirected) again
            except ClientError as gone:
                ended = gone
            if stop is not None and stop():
                return
            time.sleep(position.dropped(ended, time.monotonic()))

    # -- Python functions as nodes ----------------------------------------------------------

    def executor(
        self, node: NodeSettings | None = None, *, imports: Sequence[str] = (), **settings: Any
    ) -> RemoteExecutor:
        """A ``concurrent.futures.Executor`` whose calls run as nodes with the settings
        ``node`` gives (a :class:`~fluksio.wire.flows.NodeSettings`), or the same given by
        name: ``worker`` (a label) with ``policy``, ``resources`` (``cpus``, ``gpus``,
        ``ram_mb``), ``limit`` (seconds it may run), ``timeout`` (seconds it may stay
        silent), ``retry`` (which failures run a call again, how often, after what wait:
        a :class:`~fluksio.wire.flows.RetryPolicy` or its dict) or ``retries`` (after a
        lost worker only), ``container`` (the image its calls run in, which a worker's
        ``--allow-image`` must allow, or ``{"image": ..., "runtime": ...}``). ``imports``:
        modules the functions use, as ``"numpy as np"`` or ``"from math import sqrt"``.
        A setting a node may not have is a ``ValueError`` naming it, here rather than at
        the first call. See docs/python.md."""
        shared = executor_node(node, settings)
        # Loaded when first asked for: a command that only reads answers need not pay for
        # reading functions' source (ast, inspect) and futures.
        executor: type[RemoteExecutor] = importlib.import_module(
            "fluksio.client.executor"
        ).RemoteExecutor
        return executor(self, shared, imports)
