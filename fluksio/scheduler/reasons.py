"""Sentences that say why a request waits, written for the person who has to act on them.

Examples of each kind (``tests/test_scheduler_reasons.py`` holds them all)::

    no attached worker carries label 'gpu'
    2 workers carry 'gpu'; none has 2 GPUs free (gpu-a: 1 of 4 free; gpu-b: all 1 slots busy)
    needs 8 GPUs; the largest worker or profile with 'gpu' has 4
    provisioning hpc/gpu-small (outstanding): no attached worker carries label 'gpu'
    provisioning hpc/gpu-small, Slurm job 41 PENDING (Priority)
    provisioning hpc/gpu-small, the last attempt failed (sbatch: ...); trying again in 20 s
    waiting for the engine: all 4 slots busy
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from fluksio.scheduler.model import (
    CallRequest,
    Profile,
    RequestStage,
    WaitKind,
    WaitReason,
)
from fluksio.scheduler.resources import UNKNOWN, Vector
from fluksio.scheduler.state import PlaceState

__all__ = ["describe_need", "explain_place", "provisioning", "render"]

_MAX_DETAILS = 4
_UNITS = ("GPUs", "cpus", "MB")


def _amount(value: int, index: int) -> str:
    if index == 0:
        return f"{value} GPU" if value == 1 else f"{value} GPUs"
    if index == 1:
        return f"{value} cpu" if value == 1 else f"{value} cpus"
    return f"{value} MB"


def describe_need(need: Vector) -> str:
    parts = [_amount(need[i], i) for i in range(3) if need[i] > 0]
    if not parts:
        return "a free slot"
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _shortages(place: PlaceState, need: Vector) -> list[str]:
    """Which resources ``place`` lacks for ``need`` right now, most telling first."""
    capacity, used, held = place.capacity, place.used, place.held
    lacking = []
    if capacity[3] - used[3] <= 0:
        lacking.append("slots")
    for d, name in enumerate(("gpus", "cpus", "ram_mb")):
        if capacity[d] != UNKNOWN and capacity[d] - used[d] < need[d]:
            lacking.append(name)
    if not lacking and any(
        capacity[d] != UNKNOWN and capacity[d] - used[d] - held[d] < need[d] for d in range(4)
    ):
        lacking.append("reserved")
    return lacking


def _too_small(place: PlaceState, need: Vector) -> int | None:
    for d in range(4):
        if place.capacity[d] != UNKNOWN and place.capacity[d] < need[d]:
            return d
    return None


def _shortfall(place: PlaceState, need: Vector, asks_one_kind: bool) -> str:
    """What ``place`` lacks, as a phrase: "all 4 slots busy", "1 of 4 GPUs free", ..."""
    capacity, used = place.capacity, place.used
    small = _too_small(place, need)
    if small is not None:
        return f"too small ({_amount(capacity[small], small)})"
    lacking = _shortages(place, need)
    if not lacking:
        return "has room now"
    first = lacking[0]
    if first == "slots":
        return f"all {capacity[3]} slots busy"
    if first == "reserved":
        return "held for an earlier request"
    d = ("gpus", "cpus", "ram_mb").index(first)
    unit = "" if asks_one_kind else f" {_UNITS[d]}"
    return f"{capacity[d] - used[d]} of {capacity[d]}{unit} free"


def _detail(place: PlaceState, need: Vector, asks_one_kind: bool) -> str:
    return f"{place.worker.name}: {_shortfall(place, need, asks_one_kind)}"


def _busy(
    label: str | None, need: Vector, places: Sequence[PlaceState], engine: bool
) -> tuple[str, Counter[str]]:
    asks_one_kind = sum(1 for d in range(3) if need[d] > 0) <= 1
    ordered = sorted(places, key=lambda p: p.worker.name)
    details = [_detail(p, need, asks_one_kind) for p in ordered[:_MAX_DETAILS]]
    if len(ordered) > _MAX_DETAILS:
        details.append(f"and {len(ordered) - _MAX_DETAILS} more")
    exhausted: Counter[str] = Counter()
    for place in ordered:
        exhausted.update(_shortages(place, need))
    if engine:
        detail = _shortfall(ordered[0], need, asks_one_kind) if ordered else "not available"
        return f"waiting for the engine: {detail}", exhausted
    count = len(ordered)
    carry = f"{count} worker carries" if count == 1 else f"{count} workers carry"
    wanted = describe_need(need)
    headline = "none has a free slot" if wanted == "a free slot" else f"none has {wanted} free"
    return f"{carry} {label!r}; {headline} ({'; '.join(details)})", exhausted


def _largest(places: Sequence[PlaceState], profiles: Sequence[Profile], d: int) -> int:
    sizes = [p.capacity[d] for p in places]
    sizes += [UNKNOWN if v is None else v for v in (_profile_amount(p, d) for p in profiles)]
    return max(sizes, default=0)


def _profile_amount(profile: Profile, d: int) -> int | None:
    return (profile.gpus, profile.cpus, profile.ram_mb)[d]


def _too_large(
    label: str | None,
    need: Vector,
    places: Sequence[PlaceState],
    profiles: Sequence[Profile],
    engine: bool,
) -> str:
    if engine and label is None:
        for d in range(3):
            have = _largest(places, (), d)
            if need[d] > have:
                return f"needs {_amount(need[d], d)}; the engine has {have}"
        return f"needs {describe_need(need)}; the engine has no slot for it"
    which = "worker or profile" if profiles else "worker"
    where = f"{which} with {label!r}"
    pool = () if engine else places
    for d in range(3):
        have = _largest(pool, profiles, d)
        if need[d] > have:
            return f"needs {_amount(need[d], d)}; the largest {where} has {have}"
    return f"needs {describe_need(need)} on one machine; no {where} has all of that"


def render(
    *,
    kind: WaitKind,
    label: str | None,
    need: Vector,
    places: Sequence[PlaceState],
    profiles: Sequence[Profile],
    held_on: str | None,
    profile: str | None,
) -> WaitReason:
    """The reason for a request of this label and need, given the places it may use."""
    engine = bool(places) and places[0].groups == (None,)
    if kind is WaitKind.BUSY:
        text, exhausted = _busy(label, need, places, engine)
        if held_on is not None:
            text += "; next in line" if engine else f"; next in line on {held_on}"
        return WaitReason(kind, text, dict(exhausted), reserved_on=held_on)
    if kind is WaitKind.NO_WORKER:
        return WaitReason(kind, f"no attached worker carries label {label!r}")
    if kind is WaitKind.PROVISIONING:
        cause = (
            f"no attached worker carries label {label!r}"
            if not places or engine
            else _too_large(label, need, places, (), engine)
        )
        return WaitReason(
            kind, f"provisioning {profile} (outstanding): {cause}", provisioning=profile
        )
    return WaitReason(kind, _too_large(label, need, places, profiles, engine))


def provisioning(profile: Profile, now: float | None) -> WaitReason | None:
    """The reason of a request waiting for ``profile``, from how its provisioning stands.

    None while the driver has said nothing of it yet (the pass that asks comes first).
    """
    state = profile.provisioning
    noun, job = state.noun, state.job_id
    if state.stage is RequestStage.SUBMITTING:
        said = f"submitting a {noun}"
    elif state.stage is RequestStage.STARTED:
        said = f"{noun} {job} {state.status or 'submitted'}, waiting for its worker to attach"
    elif state.stage is not None:
        said = f"{noun} {job} {state.status or 'submitted'}"
    elif state.last_error is not None:
        said = f"the last attempt failed ({state.last_error})"
        if state.retry_at is not None and now is not None:
            said += f"; trying again in {max(0.0, state.retry_at - now):.0f} s"
    else:
        return None
    return WaitReason(
        WaitKind.PROVISIONING, f"provisioning {profile.key}, {said}", provisioning=profile.key
    )


def explain_place(request: CallRequest, need: Vector, place: PlaceState) -> str:
    """Why ``request`` is not running on ``place`` right now."""
    name = place.worker.name
    if request.label is not None and request.label not in place.worker.labels:
        return f"{name} does not carry label {request.label!r}"
    if request.label is None and place.groups != (None,):
        return "requests without a label run on the engine"
    small = _too_small(place, need)
    if small is not None:
        return (
            f"{name} is too small: it has {_amount(place.capacity[small], small)},"
            f" the request needs {_amount(need[small], small)}"
        )
    if not _shortages(place, need):
        return f"{name} could run it; it starts at the next pass"
    return f"{name}: {_shortfall(place, need, False)}; the request needs {describe_need(need)}"
