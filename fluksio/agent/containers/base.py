"""What every container runtime does for a call, and the one interface each implements."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from fluksio.agent.errors import AgentError
from fluksio.agent.images import image_file, image_matches, image_refusal
from fluksio.agent.realtime import realtime_within

__all__ = ["PASSED_FDS", "RUNNER_INSIDE", "ContainerError", "ContainerRuntime", "Mount"]

RUNNER_INSIDE = "/fluksio/runner.py"
"""Where the runner is mounted, read-only, in every container."""
RECORD_FD = 3
LIFELINE_FD = 4
OUTPUT_FD = 5
"""The call's descriptors inside: its records; the lifeline (the worker holds its other
end, so that the call ends with the worker however the worker ends); and its output, the
launcher's pipe itself, not relayed by the runtime (a relayed line could come after the
call's result)."""
PASSED_FDS = 3


class ContainerError(AgentError):
    """A runtime that cannot run containers here, or an image it cannot make ready: one
    sentence."""


@dataclass(frozen=True)
class Mount:
    """A host path seen at ``target`` in the container."""

    source: str
    target: str
    read_only: bool = True


def runner_argv() -> list[str]:
    """What the container runs: the runner, with its records, lifeline and output on the
    descriptors above (no parent to watch: in the container it has none of ours)."""
    return [RUNNER_INSIDE, "call", "0", str(RECORD_FD), str(LIFELINE_FD), str(OUTPUT_FD)]


class ContainerRuntime(ABC):
    """One runtime: checked at the worker's start, images made ready once per worker,
    calls run by argv and signalled by name."""

    name: ClassVar[str]

    def __init__(self, images: tuple[str, ...], *, command: str | None = None) -> None:
        """``images``: the patterns of the images calls may run in (``*`` within a
        segment: :mod:`~fluksio.agent.images`);
        ``command``: the runtime's program, if not found by its name."""
        self.images = images
        self.command = command or self.name
        self._ready: dict[str, asyncio.Future[str]] = {}
        self.settings: list[str] = []
        """Options every run needs here, found by :meth:`check` (rlimits the runtime may
        set)."""
        self.bounds_memory = True
        """Whether it holds a call to its memory (found by :meth:`check`)."""

    def allows(self, image: str) -> bool:
        """Whether a pattern matches ``image`` (:mod:`~fluksio.agent.images`); a file's,
        once its path is resolved too (a link out of the folder a pattern names is not)."""
        if image_refusal(image) is not None or not self._matched(image):
            return False
        found = image_file(image)
        return found is None or self._matched(found[0] + os.path.realpath(found[1]))

    def _matched(self, image: str) -> bool:
        return any(image_matches(pattern, image) for pattern in self.images)

    def hold(self, images: list[str]) -> None:
        """Images found here already (at start), of those calls may run in: ready."""
        loop = asyncio.get_running_loop()
        for image in filter(self.allows, images):
            self._ready[image] = loop.create_future()
            self._ready[image].set_result(image)

    def forget(self, image: str) -> None:
        """No longer count ``image`` as ready (it was removed): the next call makes it so."""
        self._ready.pop(image, None)

    def held(self) -> list[str]:
        """The images made ready so far (each once per worker)."""
        return sorted(
            i
            for i, task in self._ready.items()
            if task.done() and not task.cancelled() and task.exception() is None
        )

    async def ready(self, image: str, progress_fd: int) -> str:
        """``image`` made ready to run (pulled, loaded), once per worker: the reference a
        run names. The first call to need it writes the runtime's progress to
        ``progress_fd`` (its own output); the others wait for the same."""
        task = self._ready.get(image)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.get_running_loop().create_task(self._make_ready(image, progress_fd))
            self._ready[image] = task
        return await asyncio.shield(task)

    @abstractmethod
    async def check(self) -> None:
        """Whether the runtime starts a container here; :class:`ContainerError` with the
        one sentence a person acts on when it does not. Run once, at the worker's start."""

    @abstractmethod
    async def _make_ready(self, image: str, progress_fd: int) -> str:
        """Pull or load ``image`` if it is not here; its reference to run."""

    @abstractmethod
    def run_argv(
        self, *, name: str, image: str, mounts: list[Mount], devices: list[str], ram_mb: int | None
    ) -> list[str]:
        """The argv that runs one call, named ``name``, in ``image`` (as :meth:`ready`
        gave it): stdin its spec, fds 3 to 5 passed in; stdout and stderr the runtime's own
        words."""

    @abstractmethod
    async def signal(self, name: str, signum: int) -> None:
        """Send the container's processes ``signum``; SIGKILL ends it, all in it."""

    @property
    def kills_by_process(self) -> bool:
        """The container's processes are below the argv's process (no daemon between):
        it is signalled as a call on the host is."""
        return False


async def run_quietly(*argv: str, timeout: float = 60.0) -> tuple[int, str]:
    """Run a runtime's command; its exit status and what it said (stdout and stderr). -1:
    it could not be started."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:  # not there, or not a program: no exit status of its own
        return -1, f"{argv[0]}: {exc.strerror or exc}"
    try:
        said, _ = await realtime_within(timeout, process.communicate())
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL)
        await process.wait()
        return 124, f"{argv[0]} did not answer in {timeout:g} s"
    return process.returncode or 0, said.decode(errors="replace")


def last_line(said: str) -> str:
    """A runtime's error, in one line: its last non-empty line, without its prefix."""
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    line = lines[-1] if lines else "it said nothing"
    return line.removeprefix("Error: ").removeprefix("ERROR: ")
