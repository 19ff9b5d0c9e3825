"""Apptainer: a call runs as a child of ``apptainer exec`` (no daemon between), so its
descriptors pass as they are and it is signalled, and killed, as a call on the host is.

Not packaged for Debian 12, so not run here: written to the same interface as
:class:`~.podman.Podman`, its argv checked by the tests. GPUs: ``--nv`` binds the
driver's libraries; the call sees its devices by ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

from fluksio.agent.containers.base import (
    ContainerError,
    ContainerRuntime,
    Mount,
    last_line,
    run_quietly,
    runner_argv,
)

__all__ = ["Apptainer"]


class Apptainer(ContainerRuntime):
    name = "apptainer"

    async def check(self) -> None:
        status, said = await run_quietly(self.command, "--version")
        if status != 0:
            raise ContainerError(
                f"--containers apptainer: apptainer does not run here: {last_line(said)}"
            )

    async def _make_ready(self, image: str, progress_fd: int) -> str:
        # A .sif file runs as it is; a reference is built into one by the first call
        # (apptainer keeps its layers in its cache, so later calls start from there).
        if image.startswith("/"):
            return image
        return f"docker://{image}" if "://" not in image else image

    def run_argv(
        self, *, name: str, image: str, mounts: list[Mount], devices: list[str], ram_mb: int | None
    ) -> list[str]:
        argv = [self.command, "exec", "--contain", "--cleanenv", "--env", "PYTHONUNBUFFERED=1"]
        for mount in mounts:
            argv += ["--bind", f"{mount.source}:{mount.target}{':ro' if mount.read_only else ''}"]
        if devices:
            argv.append("--nv")
        return [*argv, image, "python3", *runner_argv()]

    async def signal(self, name: str, signum: int) -> None:
        raise ContainerError("apptainer's calls are signalled as processes")

    @property
    def kills_by_process(self) -> bool:
        return True
