"""What a profile's ``sbatch`` options say: its time limit and its partitions; and what
``sinfo`` says of the partitions they name."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

__all__ = [
    "missing_partitions",
    "parse_slurm_time",
    "past_time_limits",
    "sbatch_option",
    "sbatch_partitions",
    "sbatch_time_limit",
    "slurm_time_text",
]


class _Profile(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def sbatch(self) -> list[str]: ...

    @property
    def time_limit_s(self) -> float | None: ...


_NO_LIMIT = frozenset({"UNLIMITED", "INFINITE", "0"})


def parse_slurm_time(text: str) -> float | None:
    """Seconds from a Slurm time limit, in any of its forms; None for no limit.

    ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``, ``days-hours``,
    ``days-hours:minutes``, ``days-hours:minutes:seconds``; ``0``, ``UNLIMITED`` and
    ``INFINITE`` mean none. Anything else raises ValueError.
    """
    value = text.strip().upper()
    if value in _NO_LIMIT:
        return None
    days, dash, rest = value.rpartition("-") if "-" in value else ("", "", value)
    if not re.fullmatch(r"\d+(:\d+){0,2}", rest) or (dash and not days.isdigit()):
        raise ValueError(f"{text!r} is not a Slurm time limit")
    parts = [int(p) for p in rest.split(":")]
    if dash:  # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = [*parts, 0, 0][:3]
        total = int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
    elif len(parts) == 1:  # minutes
        total = parts[0] * 60
    elif len(parts) == 2:  # minutes:seconds
        total = parts[0] * 60 + parts[1]
    else:  # hours:minutes:seconds
        total = parts[0] * 3600 + parts[1] * 60 + parts[2]
    return float(total) if total else None


def sbatch_option(options: list[str], long: str, short: str) -> str | None:
    """The value of the last ``--long``/``-s`` among ``sbatch`` options, if any (the last
    wins, as with sbatch itself): ``sbatch_option(opts, "time", "t")``."""
    pattern = re.compile(rf"^(?:--{long}=|--{long}\s+|-{short}\s*)(\S+)$")
    found = None
    for option in options:
        match = pattern.match(option.strip())
        if match is not None:
            found = match.group(1)
    return found


def sbatch_time_limit(options: list[str]) -> str | None:
    """The value of the last ``--time``/``-t`` among ``sbatch`` options, if any."""
    return sbatch_option(options, "time", "t")


def sbatch_partitions(options: list[str]) -> list[str]:
    """The partitions the last ``--partition``/``-p`` among ``sbatch`` options names (a
    comma-separated list: the job may run in any of them); empty: the cluster's default."""
    named = sbatch_option(options, "partition", "p") or ""
    return [part for part in named.split(",") if part]


def missing_partitions(profiles: Sequence[_Profile], sinfo_partitions: list[str]) -> list[str]:
    """A sentence for each profile naming a partition ``sinfo`` does not list."""
    known = {name.rstrip("*") for name in sinfo_partitions}
    shown = ", ".join(sorted(known)) or "none"
    return [
        f"profile {profile.name!r} asks for partition {partition!r}, which the cluster"
        f" does not have (sinfo lists: {shown})"
        for profile in profiles
        for partition in sbatch_partitions(profile.sbatch)
        if partition not in known
    ]


def past_time_limits(
    profiles: Sequence[_Profile], limits: dict[str, float | None], default: str | None
) -> list[str]:
    """A sentence for each profile whose jobs ask for more time than every partition they
    may run in allows (``limits``: each partition's time limit as ``sinfo`` says, None for
    none; ``default``: the cluster's default partition, for a profile that names none).
    Slurm refuses such a job, or leaves it pending for ever."""
    said = []
    for profile in profiles:
        asked = profile.time_limit_s
        named = sbatch_partitions(profile.sbatch) or ([default] if default else [])
        known = [limits[p] for p in named if p in limits]  # a missing one is said apart
        if asked is None or not known or any(most is None or asked <= most for most in known):
            continue
        allowed = " or ".join(
            f"{p!r} ({slurm_time_text(limits[p] or 0)})" for p in named if p in limits
        )
        said.append(
            f"profile {profile.name!r} asks for jobs of {slurm_time_text(asked)}, longer than"
            f" partition {allowed} allows; ask for less, or name another partition"
        )
    return said


def slurm_time_text(seconds: float) -> str:
    """A time limit as Slurm writes one: ``00:05:00``, ``2-00:00:00``."""
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text
