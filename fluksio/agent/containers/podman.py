"""Podman: each call a ``podman run --rm`` of its own, rootful or rootless as the worker
runs; its records and lifeline passed in with ``--preserve-fds``."""

from __future__ import annotations

import asyncio
import os
import re
import resource
import shutil
import signal
import tempfile

from fluksio.agent.containers.base import (
    PASSED_FDS,
    ContainerError,
    ContainerRuntime,
    Mount,
    last_line,
    run_quietly,
    runner_argv,
)

__all__ = ["Podman"]

_RLIMIT_REFUSED = re.compile(r"rlimit type (\d+)")
_RLIMITS = {
    resource.RLIMIT_NOFILE: ("nofile", 1024),
    resource.RLIMIT_NPROC: ("nproc", 1024),
}
"""The rlimits a runtime may refuse to set (by number, as runc names them), with the
least the worker would run a container with."""
_TRIES = 12
_TRANSPORT = re.compile(r"^[a-z-]+:/")
"""An image read from a file or directory (``oci-archive:/images/tool.tar``), not a name."""


class Podman(ContainerRuntime):
    name = "podman"

    async def check(self) -> None:
        """Start a container with nothing in it (an empty root file system, a command
        that is not there): a runtime that can start one answers "not found" (127).

        Debian's runtimes refuse rlimits their process may not raise (``error setting
        rlimit type 7``: the default ``nofile`` of podman is more than this machine allows
        a process). Then it is tried again with this process's own limit, halved until
        the runtime takes it: calls then run with those, and the log says which."""
        limits: dict[int, int] = {}
        for _ in range(_TRIES):
            options = [
                f"--ulimit={_RLIMITS[kind][0]}={value}:{value}" for kind, value in limits.items()
            ]
            status, said = await self._probe(options)
            if status == 127:
                self.settings = options
                await self._memory_bounds()
                await self._held_here()
                return
            refused = _RLIMIT_REFUSED.search(said)
            kind = int(refused.group(1)) if refused else None
            if kind not in _RLIMITS:
                break
            least = _RLIMITS[kind][1]
            value = limits.get(kind) or resource.getrlimit(kind)[0]
            if kind in limits:
                value //= 2
            if value == resource.RLIM_INFINITY or value < least:
                break
            limits[kind] = value
        raise ContainerError(
            f"--containers podman: podman cannot start a container here: {last_line(said)}"
        )

    async def _held_here(self) -> None:
        """The images of this machine's podman (this user's) that calls may run in: ready,
        and told to the engine, so that their calls come here first."""
        status, said = await run_quietly(
            self.command, "images", "--format", "{{.Repository}}:{{.Tag}}"
        )
        if status == 0:
            self.hold([name for name in said.split() if not name.startswith("<none>")])

    async def _memory_bounds(self) -> None:
        """Whether ``--memory`` bounds a call here: rootless podman on cgroup v1 ignores it,
        saying so in every call's output, so it is not passed there."""
        if os.geteuid() == 0:
            return
        status, said = await run_quietly(
            self.command, "info", "--format", "{{.Host.CgroupsVersion}}"
        )
        self.bounds_memory = status == 0 and said.strip() != "v1"

    async def _probe(self, options: list[str]) -> tuple[int, str]:
        root = tempfile.mkdtemp(prefix="fluksio-probe-")
        try:
            return await run_quietly(
                self.command, "run", "--rm", "--network=none", "--log-driver=none",
                *options, "--rootfs", root, "/fluksio-probe",
            )  # fmt: skip
        finally:
            await asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, root, True)

    async def _make_ready(self, image: str, progress_fd: int) -> str:
        if not _TRANSPORT.match(image):  # a name: perhaps here already
            status, _said = await run_quietly(self.command, "image", "exists", image)
            if status == 0:
                return image
        pulling = f"fluksio: pulling {image} with podman, once for this worker\n"
        os.write(progress_fd, pulling.encode())
        process = await asyncio.create_subprocess_exec(
            self.command, "pull", image,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=progress_fd,
        )  # fmt: skip
        said, _ = await process.communicate()
        lines = said.decode(errors="replace").split()
        if process.returncode != 0 or not lines:
            raise ContainerError(f"podman could not pull image {image!r} (see the call's output)")
        return lines[-1]  # the image's id

    def run_argv(
        self, *, name: str, image: str, mounts: list[Mount], devices: list[str], ram_mb: int | None
    ) -> list[str]:
        argv = [
            self.command, "run", "--rm", "--interactive", "--name", name,
            "--label", "fluksio.call=1", "--pull=never", "--log-driver=none",
            "--network=host", f"--preserve-fds={PASSED_FDS}", "--env", "PYTHONUNBUFFERED=1",
            "--entrypoint", "python3", *self.settings,
        ]  # fmt: skip
        for mount in mounts:
            argv += ["--volume", f"{mount.source}:{mount.target}{':ro' if mount.read_only else ''}"]
        for device in devices:
            argv += ["--device", device]
        if ram_mb and self.bounds_memory:
            argv += [f"--memory={ram_mb}m"]
        return [*argv, image, *runner_argv()]

    async def signal(self, name: str, signum: int) -> None:
        await run_quietly(self.command, "kill", f"--signal={signal.Signals(signum).name}", name)
