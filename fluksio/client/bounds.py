"""How much a client takes from an engine, and for how long: an engine that misbehaves (or
a proxy between, or something posing as one) cannot make a script run out of memory,
hang, crash on its JSON, or carry its credential elsewhere.

- An answer is at most :attr:`Bounds.answer_bytes` (256 MiB; an artifact's bytes
  :attr:`Bounds.artifact_bytes`, 10 GiB, the engine's own default bound); a larger one is
  given up as soon as it is known to be larger (its declared length, or the bytes so far).
- What a JSON answer becomes is bounded too: at most :attr:`Bounds.parsed_bytes` (1 GiB)
  of Python objects, estimated from above before it is read (:func:`parsed_estimate`):
  32 MiB of ``[{}, {}, ...]`` would become about a GiB of empty dicts.
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
import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fluksio.client.errors import ClientError, Redirected

__all__ = [
    "EVENT_BYTES",
    "Bounds",
    "Reading",
    "Watch",
    "Watchdog",
    "check_parsed",
    "json_of",
    "parsed_estimate",
    "redirected",
    "shut",
]

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
    parsed_bytes: int = 1 << 30

    def reading(self, what: str, started: float, *, sent: int, large: bool) -> Reading:
        """One answer to read: to ``what`` (``GET /runs/ID``), begun at ``started`` (the
        client's clock), its request having sent ``sent`` bytes; ``large``: an artifact's
        (bytes kept as they are: nothing is parsed)."""
        most = self.artifact_bytes if large else self.answer_bytes
        return Reading(self, what, most, started, sent, parsed=not large)


class Reading:
    """One answer as it comes, sans I/O (both clients feed it what they read): its pieces,
    its size bound, and its deadline, which each MiB moved either way pushes on."""

    def __init__(
        self, bounds: Bounds, what: str, most: int, started: float, sent: int, *, parsed: bool
    ):
        self._bounds = bounds
        self._parsed = parsed
        self.what = what
        self._most = most
        self._started = started
        self._sent = sent
        self.received = 0
        self._pieces: list[bytes] = []

    @property
    def deadline(self) -> float:
        """When it is given up: the bound's time, and its time per MiB sent and received."""
        moved = (self._sent + self.received) / MIB
        return self._started + self._bounds.within_s + moved * self._bounds.per_mib_s

    def declared(self, length: int | None) -> None:
        """The length its headers declare: refused at once when over the bound."""
        if length is not None and length > self._most:
            raise self._too_large(length)

    def add(self, piece: bytes) -> None:
        self._pieces.append(piece)
        self.received += len(piece)
        if self.received > self._most:
            raise self._too_large(self.received)

    def body(self) -> bytes:
        """The whole answer; :class:`ClientError` when what it would become as JSON is
        over the bound (checked before it is parsed, so it never is)."""
        raw = b"".join(self._pieces)
        if self._parsed:
            check_parsed(raw, self.what, self._bounds.parsed_bytes)
        return raw

    def too_slow(self) -> ClientError:
        bounds = self._bounds
        return ClientError(
            f"the engine's answer to {self.what} did not come whole within"
            f" {bounds.within_s:g} s and {bounds.per_mib_s:g} s per MiB ({self.received}"
            " bytes had come); given up"
        )

    def _too_large(self, size: int) -> ClientError:
        return ClientError(
            f"the engine's answer to {self.what} is {size} bytes or more, over this client's"
            f" bound of {self._most} bytes (Client(url, bounds=Bounds(...)) moves it); large"
            " results belong in artifacts"
        )


def redirected(what: str, status: int, location: str | None) -> Redirected:
    """A redirect, refused: following it would send the credential wherever it points."""
    where = f" to {location}" if location else ""
    return Redirected(
        f"the engine answered {what} with a redirect ({status}){where}; fluksio follows no"
        " redirect, which would carry your credential there: give the engine's own URL"
    )


def parsed_estimate(raw: bytes) -> int:
    """Bytes of Python objects JSON ``raw`` becomes, estimated from above by what makes
    objects (an empty dict is 64 bytes, a list 56, a value and its slot about 40, a
    string's own header 25 a quote): a C-speed count, no parse."""
    values = raw.count(b",") + raw.count(b":")
    return (
        len(raw) + 64 * raw.count(b"{") + 56 * raw.count(b"[") + 40 * values + 25 * raw.count(b'"')
    )


def check_parsed(raw: bytes, what: str, most: int) -> None:
    """:class:`ClientError` when ``raw`` would become more than ``most`` bytes as JSON."""
    estimate = parsed_estimate(raw)
    if estimate > most:
        raise ClientError(
            f"the engine's answer to {what} ({len(raw)} bytes) would become about"
            f" {estimate >> 20} MiB as Python objects, over this client's bound of"
            f" {most >> 20} MiB (Client(url, bounds=Bounds(parsed_bytes=...)) moves it);"
            " large results belong in artifacts"
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
    """One thread for every blocking request: it shuts a request's socket once its answer
    is past its deadline, so that a blocked read returns whatever the engine is doing.
    (A socket timeout bounds one read; a trickle of one byte a read would never end.)
    It holds only the requests under way: one per thread at most."""

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._active: set[Watch] = set()
        self._thread: threading.Thread | None = None

    def watch(self, reading: Reading, cut: Callable[[], None]) -> Watch:
        watch = Watch(self, reading, cut)
        with self._wake:
            self._active.add(watch)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="fluksio-client-deadlines", daemon=True
                )
                self._thread.start()
            self._wake.notify()
        return watch

    def done(self, watch: Watch) -> None:
        with self._wake:
            self._active.discard(watch)

    def _run(self) -> None:
        with self._wake:
            while True:
                now = time.monotonic()
                for late in [w for w in self._active if w.reading.deadline <= now]:
                    self._active.discard(late)
                    late.fired = True
                    late.cut()
                # A deadline only moves later: waking at the soonest one seen is never late.
                soonest = min((w.reading.deadline for w in self._active), default=None)
                self._wake.wait(None if soonest is None else soonest - now)


class Watch:
    """One blocking request under the watchdog: its answer's :class:`Reading` says its
    deadline; ``cut`` ends its connection (from the watchdog's thread)."""

    def __init__(self, dog: Watchdog, reading: Reading, cut: Callable[[], None]) -> None:
        self._dog = dog
        self.reading = reading
        self.cut = cut
        self.fired = False

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._dog.done(self)


def shut(sock: socket.socket | None) -> None:
    """End a socket's traffic both ways, from any thread: a read blocked on it returns."""
    if sock is not None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)
