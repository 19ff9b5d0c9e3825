"""What this machine (or the batch job running us) offers: cores, GPUs, memory.

Read from the batch job when there is one, else from the host; no vendor tool is called.
The device directory and the environment are parameters, so tests can describe a GPU
machine that does not exist.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Inventory", "detect_inventory"]

_NVIDIA_DEVICE = re.compile(r"^nvidia(\d+)$")


@dataclass(frozen=True)
class Inventory:
    cpus: int | None
    gpus: int | None
    ram_mb: int | None


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    match = re.match(r"^\s*(\d+)", value)
    return int(match.group(1)) if match else None


def _slurm_gpus(environ: Mapping[str, str]) -> int | None:
    count = _int(environ.get("SLURM_GPUS_ON_NODE"))
    if count is not None:
        return count
    listed = environ.get("SLURM_JOB_GPUS") or environ.get("FLUKSIO_WORKER_GPUS")
    if listed is None:
        return None
    if (
        listed.strip().isdigit()
        and "FLUKSIO_WORKER_GPUS" in environ
        and not environ.get("SLURM_JOB_GPUS")
    ):
        return int(listed)  # FLUKSIO_WORKER_GPUS may be a count
    return len([part for part in listed.split(",") if part.strip()])


def _host_ram_mb(meminfo: Path) -> int | None:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def detect_inventory(
    *,
    environ: Mapping[str, str] | None = None,
    dev_dir: Path = Path("/dev"),
    meminfo: Path = Path("/proc/meminfo"),
    cpus: int | None = None,
    gpus: int | None = None,
    ram_mb: int | None = None,
) -> Inventory:
    """The job's allocation if any, else the host's; explicit values override both.

    GPUs: ``SLURM_GPUS_ON_NODE``, else ``SLURM_JOB_GPUS`` (a list), else
    ``FLUKSIO_WORKER_GPUS`` (a count or a list), else NVIDIA device nodes counted.
    """
    env = os.environ if environ is None else environ
    detected_cpus = _int(env.get("SLURM_CPUS_ON_NODE"))
    if detected_cpus is None:
        affinity = getattr(os, "sched_getaffinity", None)
        detected_cpus = len(affinity(0)) if affinity else os.cpu_count()
    detected_ram = _int(env.get("SLURM_MEM_PER_NODE")) or _host_ram_mb(meminfo)
    detected_gpus = _slurm_gpus(env)
    if detected_gpus is None:
        try:
            detected_gpus = sum(
                1 for entry in dev_dir.iterdir() if _NVIDIA_DEVICE.match(entry.name)
            )
        except OSError:
            detected_gpus = 0
    return Inventory(
        cpus=cpus if cpus is not None else detected_cpus,
        gpus=gpus if gpus is not None else detected_gpus,
        ram_mb=ram_mb if ram_mb is not None else detected_ram,
    )
