"""``provisioners.json`` for Grid Engine: the SSH options, the cell's names, the profiles."""

from __future__ import annotations

import itertools
import re

from pydantic import Field, field_validator, model_validator

from fluksio.provisioners import BatchProfile, BatchSettings, batch_options

__all__ = ["GridEngineProfile", "GridEngineSettings", "parse_ge_time", "qsub_runtime"]

# A queue, a parallel environment or a complex: Grid Engine's names, nothing a shell reads.
_GE_NAME = r"^[A-Za-z_][A-Za-z0-9_.@-]{0,127}$"
_NO_LIMIT = frozenset({"INFINITY", "INFINITE", "UNLIMITED"})


def parse_ge_time(text: str) -> float | None:
    """Seconds from a Grid Engine time (``h_rt``): ``seconds``, ``mm:ss``, ``hh:mm:ss``
    (each part may be any size, an empty one is 0); None for ``INFINITY``. Raises
    ValueError for anything else."""
    value = text.strip()
    if value.upper() in _NO_LIMIT:
        return None
    if not re.fullmatch(r"\d*(:\d*){0,2}", value) or not value.strip(":"):
        raise ValueError(f"{text!r} is not a Grid Engine time (hh:mm:ss or seconds)")
    total = 0
    for part in value.split(":"):
        total = total * 60 + int(part or 0)
    return float(total) if total else None


def qsub_runtime(options: list[str]) -> str | None:
    """The ``h_rt`` the last ``-l`` among ``qsub`` options asks for, if any."""
    found = None
    for option in options:
        words = option.split()
        for flag, value in itertools.pairwise(words):
            if flag in ("-l", "-hard"):
                for resource in value.split(","):
                    name, _, limit = resource.partition("=")
                    if name.strip() in ("h_rt", "hard_runtime"):
                        found = limit.strip()
    return found


def ge_name(value: str, what: str) -> str:
    if not re.fullmatch(_GE_NAME, value):
        raise ValueError(f"{value!r} is not a Grid Engine {what} name")
    return value


class GridEngineProfile(BatchProfile):
    queue: str | None = None
    """The cluster queue its jobs go to (``-q``); default: any the cell chooses."""
    qsub: list[str] = Field(default_factory=list)
    """More ``qsub`` options, one option (with its value) per entry: ``"-P myproject"``,
    ``"-l h_rt=4:00:00"``. Each becomes a ``#$`` line of the job script."""

    @field_validator("queue")
    @classmethod
    def _queue_name(cls, value: str | None) -> str | None:
        return ge_name(value, "queue") if value is not None else None

    @field_validator("qsub")
    @classmethod
    def _qsub_options(cls, values: list[str]) -> list[str]:
        runtime = qsub_runtime(batch_options(values, "a qsub option"))
        if runtime is not None:
            parse_ge_time(runtime)  # a ValueError names the bad limit
        return values

    @property
    def runtime_s(self) -> float | None:
        """How long its jobs may run: ``walltime_s`` if set, else the ``h_rt`` of its
        ``qsub`` options; None: no limit the profile states."""
        if self.walltime_s is not None:
            return self.walltime_s
        runtime = qsub_runtime(self.qsub)
        return parse_ge_time(runtime) if runtime is not None else None


class GridEngineSettings(BatchSettings[GridEngineProfile]):
    """A Grid Engine cell; ``login`` is one of its submit hosts."""

    parallel_environment: str = "smp"
    """The parallel environment a profile's ``cpus`` are asked for in (``-pe smp 8``); it
    must place all slots on one host (``allocation_rule $pe_slots``)."""
    memory_resource: str | None = "h_vmem"
    """The complex a profile's ``ram_mb`` is asked for with, per slot as Grid Engine counts
    it (``ram_mb`` / ``cpus``); None: memory is not asked for (``qsub`` options may)."""
    gpu_resource: str | None = None
    """The consumable a profile's ``gpus`` are asked for with (``-l gpu=2``). Grid Engine
    has no standard one: a profile with ``gpus`` needs it named."""

    @field_validator("parallel_environment")
    @classmethod
    def _pe_name(cls, value: str) -> str:
        return ge_name(value, "parallel environment")

    @field_validator("memory_resource", "gpu_resource")
    @classmethod
    def _complex_name(cls, value: str | None) -> str | None:
        return ge_name(value, "resource") if value is not None else None

    @model_validator(mode="after")
    def _gpus_need_a_resource(self) -> GridEngineSettings:
        if self.gpu_resource is None:
            for profile in self.profiles:
                if profile.gpus:
                    raise ValueError(
                        f"profile {profile.name!r} asks for gpus, and Grid Engine has no"
                        " standard GPU resource: name the cell's consumable in gpu_resource"
                        ' (e.g. "gpu")'
                    )
        return self
