"""The engine as a place to run: its inventory, and an executor over the launcher."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from fluksio.agent.inventory import detect_inventory
from fluksio.agent.launcher import CallOutcome, Launcher
from fluksio.agent.protocol.frames import RunFrame
from fluksio.engine.workers.connection.holder import Holder
from fluksio.engine.workers.session_effects import EventCallback
from fluksio.scheduler import ENGINE_ID, Worker
from fluksio.wire.provenance import Provenance

__all__ = ["LocalExecutor", "engine_place"]


def engine_place(slots: int | None = None) -> Worker:
    """The engine's own inventory; by default two call slots per core."""
    inventory = detect_inventory()
    cores = inventory.cpus or os.cpu_count() or 1
    return Worker(
        id=ENGINE_ID,
        name="engine",
        slots=slots if slots is not None else 2 * cores,
        cpus=inventory.cpus,
        gpus=inventory.gpus,
        ram_mb=inventory.ram_mb,
    )


class LocalExecutor:
    """Runs calls placed on the engine in fresh processes on this host."""

    @property
    def labels(self) -> frozenset[str]:
        return frozenset()

    def __init__(self, launcher: Launcher, artifact_dir: Path) -> None:
        self.launcher = launcher
        self._env = {"FLUKSIO_ARTIFACT_DIR": str(artifact_dir)}
        self._provenance = Provenance(worker="engine", host=socket.gethostname())

    def call_env(self, call_id: str) -> dict[str, str]:
        return dict(self._env)

    def provenance(self) -> Provenance:
        return self._provenance

    def holder(self) -> Holder | None:
        return None  # its calls die with the engine's process

    async def run(self, spec: RunFrame, on_event: EventCallback) -> CallOutcome:
        return await self.launcher.run(spec, on_event)

    def cancel(self, call_id: str) -> bool:
        return self.launcher.cancel(call_id)
