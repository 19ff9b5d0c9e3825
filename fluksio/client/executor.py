"""``client.executor(...)``: a ``concurrent.futures.Executor`` whose calls run as nodes.

``submit(fn, *args, **kwargs)`` runs ``fn`` as a one-node run wherever the scheduler
places it (an attached worker, or a machine a provisioner brings up for it) and returns a
:class:`CallFuture`, whose arguments may be its other futures; ``map`` fans out as one
run of an array node, an item per call, its results read back in order. What can travel
is :mod:`fluksio.client.sending`'s to say, at submit. A future learns its end from the
engine's live feed, which one thread of the executor reads (opened before the first run
starts, so no end is missed); ``result()`` is the node's return value, a node's exception
is :class:`RemoteError` with the remote traceback, and ``provenance`` says where it ran.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import CancelledError, Executor, Future, InvalidStateError
from types import TracebackType
from typing import Any

from fluksio.client.errors import CannotSend, ClientError, EngineRefused
from fluksio.client.executor_client import Engine
from fluksio.client.map_futures import ItemFuture, MapFutures
from fluksio.client.map_items import item_batches
from fluksio.client.sending import check_arguments, flow_name, node_code
from fluksio.client.travel import Travelling
from fluksio.wire.answers.resources import ArtifactRef
from fluksio.wire.answers.runs import ProvenanceBody, RunBody
from fluksio.wire.states import TERMINAL_NODE_STATES, TERMINAL_RUN_STATES

__all__ = ["CallFuture", "RemoteError", "RemoteExecutor"]

RESULTS_PAGE = 1000
"""A map's results read at once."""
WAKE_AT_LEAST_S = 5.0
"""A map's reader looks again at least this often, whatever the feed says."""
ENDS_REMEMBERED = 10_000
"""Runs the feed said ended before their futures were registered (a fast run), kept."""
FEED_OPEN_WITHIN_S = 30.0


class RemoteError(Exception):
    """A node's call failed where it ran: ``type`` (its exception's, or the engine's kind:
    ``NodeLimit``, ``WorkerGone``...), ``message``, and the remote ``traceback``."""

    def __init__(self, error: dict[str, Any], code: Travelling | None = None) -> None:
        self.type = str(error.get("type", "RemoteError"))
        self.message = str(error.get("message", ""))
        self.traceback = str(error.get("traceback", ""))
        if code is not None:  # lines of the user's file, not of the node's code
            self.traceback = code.traceback(self.traceback)
        text = f"{self.type}: {self.message}"
        if self.traceback:
            text += f"\n\nRemote traceback:\n{self.traceback.rstrip()}"
        super().__init__(text)


class CallFuture(Future[Any]):
    """The future of one call: ``run_id`` and ``node`` name it on the engine;
    ``provenance`` says where it ran, once it has ended."""

    def __init__(self, executor: RemoteExecutor, run_id: str, node: str, code: Travelling) -> None:
        super().__init__()
        self.run_id = run_id
        self.node = node
        self.code = code
        """The function's node code, whose lines a remote traceback names."""
        self.provenance: ProvenanceBody | None = None
        self._executor = executor

    def result(self, timeout: float | None = None) -> Any:
        """What the call returned; its exception as :class:`RemoteError`. A ``submit``'s
        caller asks the engine itself (held until the run ends), which answers as soon as
        it ends; the feed's thread settles the futures nobody waits on."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.done():
            with contextlib.suppress(ClientError):  # the feed's thread still settles it
                self._executor.settle(self._executor.client.wait_run(self.run_id, timeout))
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return super().result(left)

    def cancel(self) -> bool:
        """Cancel the call (its run) on the engine."""
        if self.done():
            return self.cancelled()
        self._executor.client.cancel_run(self.run_id)
        return super().cancel()


class RemoteExecutor(Executor):
    """Runs functions as nodes with the placement given (see :meth:`Client.executor`)."""

    def __init__(self, client: Engine, node: dict[str, Any], imports: Sequence[str]) -> None:
        self.client = client
        self._node = node
        self._imports = tuple(imports)
        self._flows: set[str] = set()
        self._codes: dict[tuple[Callable[..., Any], bool], Travelling] = {}
        """Each function's node code, for one call or a chunk of them, made once (reading
        a function's source costs more than the rest of a submit here)."""
        self._submitted: dict[Callable[..., Any], str] = {}
        """The one-node flow each function is submitted as."""
        self._waiting: dict[str, list[CallFuture]] = {}
        self._mapping: dict[str, threading.Event] = {}
        """The runs of the maps whose results are being read: woken by the feed."""
        self._ended: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._feed_open = threading.Event()
        self._stopping = False
        self._watcher: threading.Thread | None = None
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> CallFuture:
        """``fn(*args, **kwargs)`` as a one-node run. A future of this executor's may be
        among the arguments (anywhere in them): the engine starts the call once that one
        has succeeded, with its result in its place (and skips it if it failed)."""
        args, kwargs = self._awaiting(args), self._awaiting(kwargs)
        code = self._sendable(fn, [(args, kwargs)], chunked=False)
        node = {"id": "call", "code": code.source, **self._node}
        name = self._submitted.get(fn) or self._submitted.setdefault(fn, flow_name(fn, node))
        run = self._start(name, [node], {"args": list(args), "kwargs": kwargs})
        (future,) = self._register(run, ["call"], code)
        return future

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[Any]:
        """``fn`` over the items, as one run of an array node: an item per ``chunksize``
        of them (one process for them all, as ``ProcessPoolExecutor`` packs them). The
        items go to the engine as artifacts, a batch at a time, and the results come back
        in order, a page at a time: memory is bounded by a batch, not by the items.
        Closing the results before their end cancels what has not run; results never
        read are waited for when the executor shuts down."""
        run, code, _inputs = self._send_items(fn, iterables, chunksize)
        if run is None:
            return iter(())
        woken = threading.Event()
        with self._lock:
            self._mapping[run.id] = woken
        return self._results(run.id, code, woken, timeout, chunked=chunksize > 1)

    def map_futures(
        self, fn: Callable[..., Any], *iterables: Iterable[Any], chunksize: int = 1
    ) -> list[ItemFuture]:
        """``fn`` over the items, sent as ``map`` sends them, with a future per input,
        settled as its item ends: ``as_completed`` and ``wait`` work on them, and each
        says where it ran (``provenance``). A future per input is held: for inputs
        beyond what fits in memory, ``map``'s results in order are the way."""
        run, code, inputs = self._send_items(fn, iterables, chunksize)
        if run is None:
            return []
        futures = MapFutures(self.client, run.id, inputs, chunksize, lambda e: RemoteError(e, code))
        with self._lock:
            self._mapping[run.id] = futures.woken

        def settled() -> None:
            with self._lock:
                self._mapping.pop(run.id, None)

        futures.start(RESULTS_PAGE, WAKE_AT_LEAST_S, settled)
        return futures.futures

    def _send_items(
        self, fn: Callable[..., Any], iterables: tuple[Iterable[Any], ...], chunksize: int
    ) -> tuple[RunBody | None, Travelling, int]:
        """The run of a map's array (None: there were no items), its code, its inputs."""
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1")
        code = self._sendable(fn, [], chunked=chunksize > 1)
        sent = 0

        def inputs() -> Iterator[tuple[Any, ...]]:
            nonlocal sent
            for item in zip(*iterables, strict=False):
                sent += 1
                yield item

        put = self.client.put_artifact
        batches = [
            self.client.unsent_again(functools.partial(put, batch, name="items.jsonl")).digest
            for batch in item_batches(fn.__name__, inputs(), chunksize)
        ]
        if not batches:
            return None, code, 0
        node = {"id": "map", "code": code.source, "items_from": batches, **self._node}
        return self._start(flow_name(fn, [node]), [node], {}), code, sent

    def _results(
        self,
        run_id: str,
        code: Travelling,
        woken: threading.Event,
        timeout: float | None,
        *,
        chunked: bool,
    ) -> Iterator[Any]:
        """A map's results in order, read a page at a time as its items end (the feed
        wakes the reader when the array's counts move); an item's error is raised at its
        place. Closed before its end, it cancels the rest."""
        deadline = None if timeout is None else time.monotonic() + timeout
        after, finished = -1, False
        try:
            while not finished:
                woken.clear()
                page = self.client.riding(
                    functools.partial(self.client.items, run_id, after=after, limit=RESULTS_PAGE)
                )
                for item in page.items:
                    if item.state not in TERMINAL_NODE_STATES:
                        break
                    after = item.item
                    if item.state == "cancelled":
                        raise CancelledError(f"item {item.item} of run {run_id} was cancelled")
                    if item.state != "succeeded":
                        raise RemoteError(item.error or {"type": str(item.state)}, code)
                    yield from item.result if chunked else (item.result,)
                else:
                    finished = page.next is None
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"the map's results did not come within {timeout} s")
                woken.wait(min(left, WAKE_AT_LEAST_S) if left is not None else WAKE_AT_LEAST_S)
        finally:
            with self._lock:
                self._mapping.pop(run_id, None)
            if not finished:
                with contextlib.suppress(ClientError):
                    self.client.cancel_run(run_id)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        """Leaving ``with``: wait for the calls; but when the block raised (a Ctrl-C
        among others), or a Ctrl-C comes while waiting, the calls not yet ended are
        cancelled on the engine and nothing is waited for: the script is going, and
        nothing it started is left running."""
        if error is not None:
            self.shutdown(wait=False, cancel_futures=True)
            return
        try:
            self.shutdown(wait=True)
        except KeyboardInterrupt:
            self.shutdown(wait=False, cancel_futures=True)
            raise

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more submits; ``cancel_futures``: cancel the runs not yet ended; ``wait``:
        return once every call has ended."""
        self._closed = True
        with self._lock:
            pending = {run_id: list(futures) for run_id, futures in self._waiting.items()}
            mapping = list(self._mapping)
        if cancel_futures:
            for run_id, futures in pending.items():
                self.client.cancel_run(run_id)
                for future in futures:
                    Future.cancel(future)
            for run_id in mapping:  # a map's results nobody reads any more
                with contextlib.suppress(ClientError):
                    self.client.cancel_run(run_id)
        if wait:
            for futures in pending.values():
                for future in futures:
                    _wait_quietly(future)
            for run_id in mapping:  # a map whose results were not read (to their end)
                with contextlib.suppress(ClientError):
                    self.client.wait_run(run_id)
        self._stopping = True

    # -- inside ----------------------------------------------------------------------------

    def _awaiting(self, value: Any) -> Any:
        """``value`` with each future of this executor as a reference to its result."""
        if isinstance(value, Future):
            if not (isinstance(value, CallFuture) and value._executor is self):
                raise CannotSend(
                    "only a future of this executor's submit can be an argument: pass a"
                    " value, or submit its call with this executor"
                )
            return {"$result": {"run": value.run_id, "node": value.node}}
        if isinstance(value, ArtifactRef):  # put_artifact's answer: the node reads it
            return value.model_dump(mode="json")
        if isinstance(value, (list, tuple)):
            return type(value)(self._awaiting(item) for item in value)
        if isinstance(value, dict):
            return {key: self._awaiting(item) for key, item in value.items()}
        return value

    def _sendable(
        self, fn: Callable[..., Any], calls: list[tuple[tuple[Any, ...], Any]], *, chunked: bool
    ) -> Travelling:
        if self._closed:
            raise RuntimeError("cannot submit to an executor after its shutdown")
        code = self._codes.get((fn, chunked))
        if code is None:
            code = self._codes[fn, chunked] = node_code(fn, self._imports, chunked=chunked)
        for args, kwargs in calls:
            check_arguments(fn.__name__, args, kwargs)
        self._watch()
        return code

    def _start(self, name: str, nodes: list[dict[str, Any]], params: dict[str, Any]) -> RunBody:
        """A run of the flow made for these calls, put the first time. Made transient: the
        engine's retention deletes it with the last run of it, so nothing of a ``map``
        (its arguments among it) outlives the runs; one deleted meanwhile is put again."""
        # Sent again while the engine refuses connections (a restart): a script's call
        # or map rides over it, as its waiting does.
        again = self.client.unsent_again
        put = functools.partial(self.client.put_flow, name, nodes, transient=True)
        start = functools.partial(self.client.start_run, name, params)
        if name not in self._flows:
            again(put)
            self._flows.add(name)
        try:
            return again(start)
        except EngineRefused as refused:
            if refused.status != 404:
                raise
        again(put)
        return again(start)

    def _register(self, run: RunBody, nodes: list[str], code: Travelling) -> list[CallFuture]:
        futures = [CallFuture(self, run.id, node, code) for node in nodes]
        with self._lock:
            ended = run.state in TERMINAL_RUN_STATES or run.id in self._ended
            if not ended:
                self._waiting[run.id] = futures
        if ended:
            _settle(run if run.state in TERMINAL_RUN_STATES else self.client.run(run.id), futures)
        return futures

    def _watch(self) -> None:
        """Read the live feed on a thread of its own, opened before the first run starts."""
        if self._watcher is None:
            self._watcher = threading.Thread(
                target=self._follow, name="fluksio-executor-feed", daemon=True
            )
            self._watcher.start()
        if not self._feed_open.wait(FEED_OPEN_WITHIN_S):
            raise ClientError("the engine's live feed did not open; calls cannot be followed")

    def _follow(self) -> None:
        try:
            for event in self.client.events(stop=lambda: self._stopping):
                if event.kind == "ready":
                    self._feed_open.set()
                elif event.kind == "refetch":
                    self._look_again()
                elif event.kind in ("call.state", "run.state"):
                    self._woken(str(event.data["run_id"]))
                    if event.kind == "run.state" and event.data["state"] in TERMINAL_RUN_STATES:
                        self._run_ended(str(event.data["run_id"]))
        except ClientError as lost:
            with self._lock:
                orphans = [f for futures in self._waiting.values() for f in futures]
                self._waiting.clear()
            for future in orphans:
                if not future.done():
                    future.set_exception(lost)

    def _look_again(self) -> None:
        """The feed lost events (the engine restarted, or this reader fell behind): each
        run still awaited is read again, and each map's reader woken."""
        with self._lock:
            awaited = list(self._waiting)
            mapping = list(self._mapping.values())
        for run_id in awaited:
            self.settle(self.client.riding(functools.partial(self.client.run, run_id)))
        for woken in mapping:
            woken.set()

    def _woken(self, run_id: str) -> None:
        with self._lock:
            woken = self._mapping.get(run_id)
        if woken is not None:
            woken.set()

    def _run_ended(self, run_id: str) -> None:
        with self._lock:
            futures = self._waiting.pop(run_id, None)
            if futures is None:
                self._ended[run_id] = None
                while len(self._ended) > ENDS_REMEMBERED:
                    self._ended.popitem(last=False)
                return
        _settle(self.client.riding(functools.partial(self.client.run, run_id)), futures)

    def settle(self, run: RunBody) -> None:
        """``run``, read by a waiting caller: its futures settle if it has ended."""
        if run.state not in TERMINAL_RUN_STATES:
            return
        with self._lock:
            futures = self._waiting.pop(run.id, None)
        if futures is not None:
            _settle(run, futures)


def _settle(run: RunBody, futures: list[CallFuture]) -> None:
    nodes = {node.id: node for node in run.nodes}
    for future in futures:
        node = nodes[future.node]
        future.provenance = node.provenance
        with contextlib.suppress(InvalidStateError):  # cancelled meanwhile
            if node.state == "succeeded":
                future.set_result(node.result)
            else:
                error = node.error or {"type": str(node.state)}
                future.set_exception(RemoteError(error, future.code))


def _wait_quietly(future: Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
