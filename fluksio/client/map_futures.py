"""The futures of a map: one per input, settled as its array item ends, so that
``concurrent.futures.as_completed`` and ``wait`` work on them.

``executor.map_futures(fn, items, chunksize=k)`` sends the same array as ``map`` does and
returns a future per input (``chunksize`` inputs share an item, and so its end). One
thread per such map reads the array's items a page at a time from the first one not yet
ended, woken by the executor's feed as the array's counts move (or every few seconds):
items run in order of position, so what has ended lies between there and the first item
not yet started, and each read settles the futures of the items that ended since the
last, in the order the reads find them. A future cancelled by its caller cancels its item
on the engine (and with it the other inputs of its chunk).

A future per input is held by the caller: memory grows with the inputs, which ``map``'s
results, read in order, do not. For a million inputs, ``map`` is the way.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, Protocol, TypeVar

from fluksio.client.errors import ClientError
from fluksio.wire.answers.runs import ItemBody, ItemsPage, ProvenanceBody, RunBody
from fluksio.wire.states import TERMINAL_NODE_STATES

Answer = TypeVar("Answer")


class ItemsOfRuns(Protocol):
    """What of the client a map's futures use: its array's items, read and cancelled."""

    def items(
        self,
        run_id: str,
        node: str | None = None,
        *,
        after: int = -1,
        limit: int = 1000,
        state: str | None = None,
    ) -> ItemsPage: ...

    def cancel_items(self, run_id: str, items: list[int], node: str | None = None) -> RunBody: ...

    def riding(self, read: Callable[[], Answer]) -> Answer: ...


__all__ = ["ItemFuture", "MapFutures"]


class ItemFuture(Future[Any]):
    """The future of one input of a map: its array item's run (``run_id``) and position
    (``item``); ``provenance`` says where that item ran, once it has ended."""

    def __init__(self, owner: MapFutures, item: int) -> None:
        super().__init__()
        self.run_id = owner.run_id
        self.item = item
        self.provenance: ProvenanceBody | None = None
        self._owner = owner

    def cancel(self) -> bool:
        """Cancel its item on the engine (the other inputs of its chunk with it)."""
        if self.done():
            return self.cancelled()
        with contextlib.suppress(ClientError):  # ended meanwhile: it settles as it ended
            self._owner.client.cancel_items(self.run_id, [self.item])
        return _cancelled(self)


class MapFutures:
    """A map's futures and the thread that settles them."""

    def __init__(
        self,
        client: ItemsOfRuns,
        run_id: str,
        inputs: int,
        chunksize: int,
        error: Callable[[dict[str, Any]], Exception],
    ) -> None:
        self.client = client
        self.run_id = run_id
        self._chunksize = chunksize
        self._error = error
        self.futures = [ItemFuture(self, n // chunksize) for n in range(inputs)]
        self.woken = threading.Event()
        """Set by the executor's feed when the array's counts move."""
        self._items = -(-inputs // chunksize)
        self._first_open = 0
        """The first item whose futures are not all settled."""

    def start(self, page: int, every_s: float, done: Callable[[], None]) -> None:
        """Settle the futures on a thread of their own, reading ``page`` items at a time,
        at least every ``every_s``; ``done`` once all are settled. If the engine cannot
        be reached, the futures not yet settled raise that."""

        def settle_all() -> None:
            try:
                while self._first_open < self._items:
                    self.woken.clear()
                    self._read(page)
                    if self._first_open < self._items:
                        self.woken.wait(every_s)
            except ClientError as lost:
                for future in self.futures:
                    with contextlib.suppress(InvalidStateError):
                        future.set_exception(lost)
            finally:
                done()

        thread = threading.Thread(target=settle_all, name="fluksio-map-futures", daemon=True)
        thread.start()

    def _read(self, page: int) -> None:
        """Settle what ended from the first open item on, until a page where nothing has
        started (nothing after it can have ended but a cancelled item, found in its turn)."""
        after, first_open = self._first_open - 1, None
        while True:
            found = self.client.riding(
                functools.partial(self.client.items, self.run_id, after=after, limit=page)
            )
            started = False
            for item in found.items:
                after = item.item
                if item.state in TERMINAL_NODE_STATES:
                    self._settle(item)
                    started = True
                else:
                    started |= item.state != "queued"
                    first_open = item.item if first_open is None else first_open
            if found.next is None or not started:
                break
        self._first_open = self._items if first_open is None else first_open

    def _settle(self, item: ItemBody) -> None:
        begin = item.item * self._chunksize
        futures = self.futures[begin : begin + self._chunksize]
        results = item.result if self._chunksize > 1 else [item.result]
        for at, future in enumerate(futures):
            if future.done():
                continue
            future.provenance = item.provenance
            if item.state == "cancelled":
                _cancelled(future)
                continue
            with contextlib.suppress(InvalidStateError):  # cancelled by its caller meanwhile
                if item.state == "succeeded":
                    future.set_result(results[at])
                else:
                    future.set_exception(self._error(item.error or {"type": str(item.state)}))


def _cancelled(future: Future[Any]) -> bool:
    """Cancel ``future`` and tell whoever waits on it (``as_completed``, ``wait``): a bare
    ``cancel`` wakes only ``result``'s callers."""
    if not Future.cancel(future):
        return future.cancelled()
    future.set_running_or_notify_cancel()
    return True
