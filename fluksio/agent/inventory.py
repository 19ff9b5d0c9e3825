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


def _cgroup_limit_mb(proc_cgroup: Path, cgroup_root: Path) -> int | None:
    """The memory limit of the control group this process runs in, the tightest of it and
    its ancestors (cgroup v2 ``memory.max``, v1 ``memory.limit_in_bytes``); None: none."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits: list[int] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            base, name = cgroup_root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = cgroup_root / "memory", "memory.limit_in_bytes"
        else:
            continue
        level = Path(path.strip() or "/")
        for directory in (level, *level.parents):
            try:
                text = (base / str(directory).lstrip("/") / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit():
                limits.append(int(text) // (1024 * 1024))
    return min(limits) if limits else None


def detect_inventory(
    *,
    environ: Mapping[str, str] | None = None,
    dev_dir: Path = Path("/dev"),
    meminfo: Path = Path("/proc/meminfo"),
    proc_cgroup: Path = Path("/proc/self/cgroup"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
    cpus: int | None = None,
    gpus: int | None = None,
    ram_mb: int | None = None,
) -> Inventory:
    """The job's allocation if any, else the host's; explicit values override both.

    Cores: ``SLURM_CPUS_ON_NODE``, else Grid Engine's ``NSLOTS``, else the CPUs this process
    may run on. Memory: ``SLURM_MEM_PER_NODE``, else ``SLURM_MEM_PER_CPU`` times the job's cores,
    else the host's; never more than the control group's memory limit, where one is set
    (a job's cgroup, a container). GPUs: ``SLURM_GPUS_ON_NODE``, else ``SLURM_JOB_GPUS``
    (a list), else ``FLUKSIO_WORKER_GPUS`` (a count or a list), else NVIDIA device nodes
    counted.
    """
    env = os.environ if environ is None else environ
    # A Slurm job's cores on this node, or a Grid Engine job's slots.
    detected_cpus = _int(env.get("SLURM_CPUS_ON_NODE")) or _int(env.get("NSLOTS"))
    if detected_cpus is None:
        affinity = getattr(os, "sched_getaffinity", None)
        detected_cpus = len(affinity(0)) if affinity else os.cpu_count()
    per_cpu = _int(env.get("SLURM_MEM_PER_CPU"))
    detected_ram = (
        _int(env.get("SLURM_MEM_PER_NODE"))
        or (per_cpu * detected_cpus if per_cpu and detected_cpus else None)
        or _host_ram_mb(meminfo)
    )
    limit = _cgroup_limit_mb(proc_cgroup, cgroup_root)
    if limit is not None and (detected_ram is None or limit < detected_ram):
        detected_ram = limit
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
