"""How much a client takes from an engine, and for how long: an engine that misbehaves (or
a proxy between, or something posing as one) cannot make a script run out of memory,
hang, crash on its JSON, or carry its credential elsewhere.

- An answer is at most :attr:`Bounds.answer_bytes` (256 MiB; an artifact's bytes
  :attr:`Bounds.artifact_bytes`, 10 GiB, the engine's own default bound); a larger one is
  given up as soon as it is known to be larger (its declared length, or the bytes so far).
- An answer is given up when it has not come whole within :attr:`Bounds.within_s` (90 s,
  above the longest wait a request may ask the engine for, 60 s) and one more second for
  each MiB it brought or its request sent: a slow link still moves a large artifact
  either way, a trickle never hangs.
- JSON too deep or broken is :class:`~fluksio.client.errors.ClientError`, never a bare
  ``RecursionError``.
- No redirect is followed: the bearer token would go wherever it points.
- An event of the live feed is at most :data:`EVENT_BYTES`.

Both clients and the feed read through these; each sentence says which bound, and how to
move it (``Client(url, bounds=Bounds(...))``).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fluksio.client.errors import ClientError, Redirected

__all__ = ["EVENT_BYTES", "Bounds", "Watch", "Watchdog", "json_of", "redirected", "shut"]

MIB = 1 << 20
EVENT_BYTES = 64 * MIB
"""One event of the live feed, at most (the largest, a ``queue`` snapshot of ten thousand
waiting calls, is a few MiB)."""


@dataclass(frozen=True)
class Bounds:
    """What a client takes from an engine (see the module)."""

    answer_bytes: int = 256 * MIB
    artifact_bytes: int = 10 << 30
    within_s: float = 90.0
    per_mib_s: float = 1.0

    def deadline(self, started: float, received: int) -> float:
        """When an answer begun at ``started`` that brought ``received`` bytes is given up."""
        return started + self.within_s + received / MIB * self.per_mib_s

    def too_large(self, what: str, size: int, most: int) -> ClientError:
        return ClientError(
            f"the engine's answer to {what} is {size} bytes or more, over this client's"
            f" bound of {most} bytes (Client(url, bounds=Bounds(...)) moves it); large"
            " results belong in artifacts"
        )

    def too_slow(self, what: str, received: int) -> ClientError:
        return ClientError(
            f"the engine's answer to {what} did not come whole within {self.within_s:g} s"
            f" and {self.per_mib_s:g} s per MiB ({received} bytes had come); given up"
        )


def redirected(what: str, status: int, location: str | None) -> Redirected:
    """A redirect, refused: following it would send the credential wherever it points."""
    where = f" to {location}" if location else ""
    return Redirected(
        f"the engine answered {what} with a redirect ({status}){where}; fluksio follows no"
        " redirect, which would carry your credential there: give the engine's own URL"
    )


def json_of(raw: bytes | str, what: str) -> Any:
    """JSON read, or :class:`ClientError` for text that is not JSON or nests too deeply."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ClientError(f"the engine's answer to {what} nests too deeply to read") from None
    except ValueError as exc:
        raise ClientError(f"the engine's answer to {what} is not JSON ({exc})") from None


class Watchdog:
    """One thread for every blocking request: it shuts a request's socket once the request
    is past its deadline, so that a blocked read returns whatever the engine is doing.
    (A socket timeout bounds one read; a trickle of one byte a read would never end.)"""

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._due: list[tuple[float, int, Watch]] = []
        self._count = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, cut: Callable[[], None], deadline: float) -> Watch:
        watch = Watch(cut, deadline)
        with self._wake:
            heapq.heappush(self._due, (deadline, next(self._count), watch))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="fluksio-client-deadlines", daemon=True
                )
                self._thread.start()
            self._wake.notify()
        return watch

    def _run(self) -> None:
        with self._wake:
            while True:
                if not self._due:
                    self._wake.wait()
                    continue
                deadline, _, watch = self._due[0]
                if watch.finished or watch.deadline > deadline:
                    heapq.heappop(self._due)
                    if not watch.finished:  # extended meanwhile: due later
                        heapq.heappush(self._due, (watch.deadline, next(self._count), watch))
                    continue
                left = deadline - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                    continue
                heapq.heappop(self._due)
                watch.fire()


class Watch:
    """One request's deadline, moved on as its answer brings bytes; ``cut`` ends its
    connection (from the watchdog's thread)."""

    def __init__(self, cut: Callable[[], None], deadline: float) -> None:
        self.cut = cut
        self.deadline = deadline
        self.finished = False
        self.fired = False
        self.received = 0
        """Bytes of the answer so far (what its deadline counts)."""

    def fire(self) -> None:
        self.fired = True
        self.cut()


def shut(sock: socket.socket | None) -> None:
    """End a socket's traffic both ways, from any thread: a read blocked on it returns."""
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)
