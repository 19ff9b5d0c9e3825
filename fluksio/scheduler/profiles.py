"""What a provisioner's profile could bring: its amounts, whether its jobs live long enough
for a request, and the smallest that fits one (of those that can bring one now, first)."""

from __future__ import annotations

from collections.abc import Iterable

from fluksio.scheduler.model import Container, Profile, may_run
from fluksio.scheduler.resources import UNKNOWN, Amounts, covers

__all__ = ["fitting_profile", "long_enough", "profile_amounts"]


def profile_amounts(profile: Profile) -> Amounts:
    """What one machine of a profile brings; what it does not state does not constrain."""
    return Amounts(
        UNKNOWN if profile.gpus is None else profile.gpus,
        UNKNOWN if profile.cpus is None else profile.cpus,
        UNKNOWN if profile.ram_mb is None else profile.ram_mb,
        UNKNOWN,
    )


def long_enough(profile: Profile, limit: float | None, margin: float) -> bool:
    """Whether a job of ``profile`` lives long enough for a request of ``limit``: one that
    states none runs in any job that outlives the margin (its job's end is then its limit)."""
    if profile.walltime_s is None:
        return True
    if limit is None:
        return margin + profile.notice_s < profile.walltime_s
    return limit + margin <= profile.walltime_s


def fitting_profile(
    profiles: Iterable[Profile],
    label: str | None,
    need: Amounts,
    limit: float | None,
    margin: float,
    *,
    by_time: bool = True,
    container: Container | None = None,
) -> Profile | None:
    """The smallest profile carrying ``label`` that covers ``need`` (and, ``by_time``, whose
    jobs live long enough for ``limit`` with ``margin`` to spare) and whose machines may
    run ``container``; None when none does.

    Of those, one that is :attr:`~Profile.bringing` a machine comes first: when the smallest is at
    its ``max_workers`` or rests after a failure (a host already running its one worker, a
    host whose sshd is down), the next that can bring one is asked for instead. Only when
    none can is the smallest returned, for the reason to say what it waits for."""
    if label is None:
        return None
    fitting = [
        (not p.bringing, profile_amounts(p), p.key, p)
        for p in profiles
        if label in p.labels
        and covers(profile_amounts(p), need)
        and (not by_time or long_enough(p, limit, margin))
        and may_run(p.containers, container)
    ]
    return min(fitting)[3] if fitting else None
