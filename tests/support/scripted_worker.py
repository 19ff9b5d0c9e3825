"""The worker end of one attach socket, written by the test.

:class:`ScriptedWorker` says hello, and answers each ``run`` frame as the test tells it, so
every ordering of frames can be produced on demand. :func:`hello_frame` is the hello it
says (the agent's own frame declarations, so it cannot drift from what workers send).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from fluksio.agent.protocol.frames import (
    PROTOCOL,
    AnswerFrame,
    ContainersReport,
    ErrorRecord,
    HelloFrame,
    InventoryReport,
    ProgressFrame,
    encode,
)
from fluksio.agent.protocol.outcome import ErrorKind
from tests.support.wait import async_wait_for

__all__ = ["ScriptedWorker", "hello_frame"]


def hello_frame(
    name: str,
    labels: list[str],
    *,
    parallel: int = 1,
    protocol: int | None = None,
    host: str | None = None,
    slurm_job_id: str | None = None,
    ends_at: float | None = None,
    inventory: dict[str, int] | None = None,
    relayed: bool = False,
    resume: list[str] | None = None,
    containers: ContainersReport | None = None,
    instance: str | None = None,
    version: str | None = "test",
) -> str:
    """A hello as the agent sends it (``protocol`` None: this build's; ``version`` None:
    as the published agent 0.1.6 says it, naming none)."""
    hello = HelloFrame(
        protocol=PROTOCOL if protocol is None else protocol,
        name=name,
        labels=labels,
        python="/usr/bin/python3",
        max_parallel=parallel,
        inventory=InventoryReport(**(inventory or {})),
        version=version,
        host=host,
        slurm_job_id=slurm_job_id,
        ends_at=ends_at,
        relayed=relayed,
        resume=resume,
        containers=containers,
        instance=instance,
    )
    return encode(hello)


@dataclass
class ScriptedWorker:
    """The worker side of one attach socket, driven by the test."""

    socket: aiohttp.ClientWebSocketResponse
    greeting: dict[str, Any] = field(default_factory=dict)
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    """Each call's frame as it came, to the byte."""
    cancelled: list[str] = field(default_factory=list)
    _answered: set[str] = field(default_factory=set)
    _reader: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for message in self.socket:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            frame = json.loads(message.data)
            if frame.get("op") in ("run", "compile"):
                self.calls[frame["call_id"]] = frame
                self.texts[frame["call_id"]] = message.data
            elif frame.get("op") == "cancel":
                self.cancelled.append(frame["call_id"])

    async def next_call(self, timeout: float = 5) -> dict[str, Any]:
        """The first call sent here that the test has not answered yet."""
        answered = self._answered

        def pending() -> dict[str, Any] | None:
            return next((c for i, c in self.calls.items() if i not in answered), None)

        return await async_wait_for(pending, timeout=timeout, what="a call for the worker")

    async def answer(self, call_id: str, result: Any = None, *, ok: bool = True) -> None:
        self._answered.add(call_id)
        await self.socket.send_str(encode(AnswerFrame(call_id=call_id, ok=ok, result=result)))

    async def checkpointed(self, call_id: str, state: dict[str, Any]) -> None:
        """End the call as our agent does after ``fluksio.checkpoint``, naming ``state``
        as given (any JSON object, as a worker of someone else's could send)."""
        self._answered.add(call_id)
        error = ErrorRecord(type=ErrorKind.CHECKPOINTED, message="saved", short="Checkpointed")
        frame = json.loads(encode(AnswerFrame(call_id=call_id, ok=False, error=error)))
        await self.socket.send_str(json.dumps({**frame, "checkpoint": state}))

    async def emit(self, call_id: str, outputs: dict[str, Any]) -> None:
        frame = ProgressFrame(call_id=call_id, event="emit", outputs=outputs, ts=1.0)
        await self.socket.send_str(encode(frame))

    async def freeze(self) -> None:
        """Stop reading, so nothing is answered, not even the engine's pings: a frozen host."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None

    def thaw(self) -> None:
        """Read again: pings waiting in the socket are answered, calls come through."""
        self.start()

    async def send_raw(self, text: str) -> None:
        await self.socket.send_str(text)

    async def close(self) -> None:
        await self.socket.close()
        if self._reader is not None:
            await self._reader
