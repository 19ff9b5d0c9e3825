"""What the provisioning driver tells the engine's event stream: typed, declared once here.

The driver emits these through the ``emit`` it is given; the engine's stream
(:mod:`fluksio.engine.stream`) carries them beside its own, and its metrics subscribe.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CommandRan",
    "ProvisioningEvent",
    "RequestAttached",
    "RequestFailed",
    "RequestSubmitted",
]


@dataclass(frozen=True)
class RequestSubmitted:
    """A request was submitted and its system took it (a job id came back)."""

    provisioner: str
    profile: str


@dataclass(frozen=True)
class RequestFailed:
    """A request ended without bringing a worker (refused, timed out, its job ended)."""

    provisioner: str
    profile: str


@dataclass(frozen=True)
class RequestAttached:
    """A request's worker attached, ``seconds`` after the request was made."""

    provisioner: str
    profile: str
    seconds: float


@dataclass(frozen=True)
class CommandRan:
    """A command ran on a provisioner's login node (``program``: its name, as the
    provisioner knows it); ``reached``: whether it got there at all."""

    provisioner: str
    program: str
    seconds: float
    reached: bool


ProvisioningEvent = RequestSubmitted | RequestFailed | RequestAttached | CommandRan
