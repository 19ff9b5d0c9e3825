"""What the connection machine (:mod:`~fluksio.engine.workers.connection.machine`) asks its
owner, the worker's session, to do: its effects, as plain data. Each kind is a class of its
own, so two kinds never compare equal; the session carries each out with one ``match``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Answering",
    "Away",
    "Cancel",
    "CloseSocket",
    "ConnectionEffect",
    "Fail",
    "Gone",
    "LinkNews",
    "NotTaking",
    "Ping",
    "TimerKind",
    "Unknown",
    "Wake",
]

TimerKind = Literal["take", "limit"]


@dataclass(frozen=True)
class _Signal:
    """An effect that carries nothing but what it is (each kind is a class of its own, so
    two kinds never compare equal)."""


class Ping(_Signal):
    """Ping the worker."""


class Away(_Signal):
    """Its socket dropped while it may come back: its calls are held."""


@dataclass(frozen=True)
class _OfCall:
    """An effect about one call in flight."""

    call_id: str


class Cancel(_OfCall):
    """Tell the worker to drop the call."""


class NotTaking(_OfCall):
    """Nothing at all came from the worker since the call was sent to it (logged)."""


@dataclass(frozen=True)
class Fail(_OfCall):
    error: dict[str, str]
    lingers: bool = False
    """The worker may still run it: it went silent (its path may have, taking the close
    with it), and our agent keeps its calls across a lost connection until its own
    deadline."""


@dataclass(frozen=True)
class Wake(_OfCall):
    """Call :meth:`ConnectionMachine.timer` with ``kind`` and ``call_id`` after ``delay_s``."""

    kind: TimerKind
    delay_s: float


@dataclass(frozen=True)
class Unknown(_OfCall):
    """A frame named a call not in flight here: ``frame`` says what it was, ``seen`` how
    many such frames came so far (only the first few are logged)."""

    frame: str
    seen: int


@dataclass(frozen=True)
class Answering:
    answering: bool


@dataclass(frozen=True)
class _Ending:
    """An effect of the connection's end, with the sentence that says why."""

    reason: str


class Gone(_Ending):
    """It ended for good."""


@dataclass(frozen=True)
class CloseSocket(_Ending):
    """Close its socket with ``code``, saying the reason; it is gone once the socket ends."""

    code: int


# What the registry of workers hears, carried out in a place of its own.
LinkNews = Answering | Away | Gone
ConnectionEffect = Fail | Cancel | Wake | Ping | NotTaking | LinkNews | CloseSocket | Unknown
