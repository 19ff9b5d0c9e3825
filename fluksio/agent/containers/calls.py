"""The launcher's side of a call in a container: what it mounts and passes in, how it is
started, and how it is signalled and ended, whatever ends it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import secrets
import signal
from pathlib import Path

from fluksio.agent import runner
from fluksio.agent.calls import Signal
from fluksio.agent.containers.base import (
    LIFELINE_FD,
    OUTPUT_FD,
    RECORD_FD,
    RUNNER_INSIDE,
    ContainerError,
    ContainerRuntime,
    Mount,
)
from fluksio.agent.images import image_refusal
from fluksio.agent.onefile import runner_path
from fluksio.agent.protocol.frames import ContainersReport, RunFrame
from fluksio.agent.protocol.outcome import CallOutcome, ErrorKind, error_record

__all__ = ["ContainerCalls", "container_name"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_GPU_SHARED = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
"""Device nodes every GPU call needs beside its own cards', where the machine has them."""


def container_name(call_id: str) -> str:
    """The container's name: the call's id, as a runtime takes a name, and a few random
    characters (a container of an earlier run of the same id may still be going away)."""
    return f"fluksio-{_UNSAFE.sub('_', call_id)[:200]}-{secrets.token_hex(3)}"


class ContainerCalls:
    """Starts calls in containers with one runtime, and ends them."""

    def __init__(
        self,
        runtime: ContainerRuntime,
        *,
        dev_dir: Path = Path("/dev"),
        place_ram_mb: int | None = None,
    ) -> None:
        """``dev_dir``: where the GPUs' device nodes are (a test's fake ones);
        ``place_ram_mb``: the worker's memory, the bound of a call that sets none."""
        self.runtime = runtime
        self._place_ram_mb = place_ram_mb
        self._dev_dir = dev_dir
        self._lifelines: dict[str, tuple[str, int]] = {}
        """A running call's container name, and this side of its lifeline."""
        self._signalling: set[asyncio.Task[None]] = set()

    def report(self) -> ContainersReport:
        return ContainersReport(runtime=self.runtime.name, images=list(self.runtime.images))

    def env(self, spec: RunFrame) -> dict[str, str]:
        """What the call is told beside its own environment: its artifact cache, the same
        directory as on the host (it is mounted at the same path)."""
        return {"FLUKSIO_ARTIFACT_CACHE": runner.artifact_cache_dir(spec.env)}

    def refusal(self, spec: RunFrame) -> str | None:
        """Why this worker may not run the call's container (the engine sends none such);
        None: it may."""
        asked = spec.container
        assert asked is not None
        runtime = self.runtime
        if asked.runtime not in (None, runtime.name):
            return f"it asks for {asked.runtime}, and this worker runs {runtime.name}"
        unreadable = image_refusal(asked.image)
        if unreadable is not None:
            return unreadable
        if not runtime.allows(asked.image):
            allowed = ", ".join(repr(i) for i in runtime.images)
            return f"image {asked.image!r} is not among this worker's --allow-image ({allowed})"
        return None

    async def start(
        self, spec: RunFrame, spec_r: int, out_w: int, rec_w: int
    ) -> asyncio.subprocess.Process:
        """Start the call's container: its spec on ``spec_r``, its output on ``out_w``,
        its records on ``rec_w``. Raises :class:`ContainerError` with why it cannot."""
        refused = self.refusal(spec)
        if refused is not None:
            raise ContainerError(f"this worker may not run the call's container: {refused}")
        assert spec.container is not None
        image = await self.runtime.ready(spec.container.image, out_w)
        name = container_name(spec.call_id)
        argv = self.runtime.run_argv(
            name=name,
            image=image,
            mounts=self._mounts(spec),
            devices=self._devices(spec),
            ram_mb=spec.ram_mb or self._place_ram_mb,
        )
        life_r, life_w = os.pipe()

        def descriptors() -> None:
            # Its records, lifeline and output at the numbers the runner is told
            # (inheritable, as dup2 makes them); every other descriptor of ours is closed
            # on exec.
            record, lifeline, output = os.dup(rec_w), os.dup(life_r), os.dup(out_w)
            os.dup2(record, RECORD_FD)
            os.dup2(lifeline, LIFELINE_FD)
            os.dup2(output, OUTPUT_FD)

        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=spec_r,
                stdout=out_w,
                stderr=out_w,
                close_fds=False,
                preexec_fn=descriptors,
                start_new_session=True,
            )
        except BaseException:
            os.close(life_w)
            raise
        finally:
            os.close(life_r)
        self._lifelines[spec.call_id] = (name, life_w)
        return process

    def outcome(self, spec: RunFrame, outcome: CallOutcome, stopped: bool) -> CallOutcome:
        """How a call in a container ended: killed (137) at its memory bound by the
        kernel, not by us (``stopped``), it says so, as the watchdog of a call on the host
        does (its runtime keeps its memory, so the peak is not known)."""
        bound = spec.ram_mb or self._place_ram_mb
        if outcome.ok or outcome.result is not None or stopped or not bound:
            return outcome
        if outcome.exit_status != 128 + signal.SIGKILL:
            return outcome
        if spec.ram_mb:
            said, remedy = f"its ram_mb of {bound:,} MB", "ask for more (resources.ram_mb)"
        else:
            said = f"the {bound:,} MB its worker has (fluksio-worker --ram-mb)"
            remedy = "give the node resources.ram_mb to be placed where that fits"
        error = error_record(
            ErrorKind.NODE_OUT_OF_MEMORY,
            f"its container was killed at {said}, the memory its runtime bounds it to;"
            f" {remedy}, or hold less",
        )
        return dataclasses.replace(outcome, error=error)

    def _mounts(self, spec: RunFrame) -> list[Mount]:
        mounts = [Mount(str(runner_path()), RUNNER_INSIDE)]
        cache = runner.artifact_cache_dir(spec.env)
        os.makedirs(cache, mode=0o700, exist_ok=True)
        mounts.append(Mount(cache, cache, read_only=False))
        store = spec.env.get("FLUKSIO_ARTIFACT_DIR")
        if store:  # the engine's store, shared with this host: read and written in place
            mounts.append(Mount(store, store, read_only=False))
        ca_file = spec.env.get("FLUKSIO_CA_FILE")
        if ca_file:
            mounts.append(Mount(ca_file, ca_file))
        return mounts

    def _devices(self, spec: RunFrame) -> list[str]:
        """Its GPUs' device nodes (``CUDA_VISIBLE_DEVICES``), at their ``/dev`` names, and
        those all GPU calls share; no other card's."""
        visible = spec.env.get("CUDA_VISIBLE_DEVICES", "")
        ids = [part.strip() for part in visible.split(",") if part.strip().isdigit()]
        if not ids:
            return []
        names = [f"nvidia{i}" for i in ids] + list(_GPU_SHARED)
        return [f"{self._dev_dir / n}:/dev/{n}" for n in names if (self._dev_dir / n).exists()]

    def signal(self, call_id: str, op: Signal, signum: int = 0) -> bool:
        """``kill`` (everything in it), ``term`` or ``notice`` (``signum``) a call's
        container; False when it is not running."""
        held = self._lifelines.get(call_id)
        if held is None:
            return False
        name, _lifeline = held
        if op is Signal.KILL:
            self.ended(call_id)  # its runner sees the lifeline end, and ends all it runs
            signum = signal.SIGKILL
        elif op is Signal.TERM:
            signum = signal.SIGTERM
        task = asyncio.get_running_loop().create_task(self.runtime.signal(name, signum))
        self._signalling.add(task)
        task.add_done_callback(self._signalling.discard)
        return True

    def ended(self, call_id: str) -> None:
        """The call is over (or is being killed): its lifeline closes."""
        held = self._lifelines.pop(call_id, None)
        if held is not None:
            with contextlib.suppress(OSError):
                os.close(held[1])
