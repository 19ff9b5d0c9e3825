"""Sentences that say why a request waits, written for the person who has to act on them.

Examples of each kind (``tests/test_scheduler_reasons.py`` holds them all)::

    no attached worker carries label 'gpu'
    2 workers carry 'gpu'; none has 2 GPUs free (gpu-a: 1 of 4 free; gpu-b: all 1 slots busy)
    needs 8 GPUs; the largest worker or profile with 'gpu' has 4
    provisioning hpc/gpu-small (outstanding): no attached worker carries label 'gpu'
    provisioning hpc/gpu-small, Slurm job 41 PENDING (Priority)
    provisioning hpc/gpu-small, the last attempt failed (sbatch: ...); trying again in 20 s
    provisioning hpc/gpu-small, login needed: run 'fluksio provisioners login hpc'
    waiting for the engine: all 4 slots busy
    needs up to 7200 s; hpc-small's job ends in 1800 s
    no worker may run image 'cuda:12'; of those with 'gpu': box runs no containers (a
      worker runs it when started with --containers and an --allow-image that matches it)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from fluksio.scheduler.model import (
    CallRequest,
    Container,
    Containers,
    Profile,
    WaitKind,
    WaitReason,
    Worker,
    may_run,
)
from fluksio.scheduler.resources import RESOURCES, UNKNOWN, Amounts
from fluksio.scheduler.state import PlaceState

__all__ = [
    "describe_need",
    "explain_place",
    "no_image",
    "provisioning",
    "render",
    "walltime",
]

_MAX_DETAILS = 4
_UNITS = {"gpus": "GPUs", "cpus": "cpus", "ram_mb": "MB"}


def _amount(value: int, resource: str) -> str:
    if resource == "gpus":
        return f"{value} GPU" if value == 1 else f"{value} GPUs"
    if resource == "cpus":
        return f"{value} cpu" if value == 1 else f"{value} cpus"
    return f"{value} MB"


def _asked(need: Amounts) -> list[str]:
    """The resources ``need`` asks some of, in best-fit order."""
    return [resource for resource in RESOURCES if getattr(need, resource) > 0]


def describe_need(need: Amounts) -> str:
    parts = [_amount(getattr(need, resource), resource) for resource in _asked(need)]
    if not parts:
        return "a free slot"
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _left(place: PlaceState, resource: str) -> int:
    """How much of ``resource`` running calls leave on ``place`` (holds not counted)."""
    return int(getattr(place.capacity, resource)) - int(getattr(place.used, resource))


def _shortages(place: PlaceState, need: Amounts) -> list[str]:
    """Which resources ``place`` lacks for ``need`` right now, most telling first."""
    capacity, held = place.capacity, place.held
    lacking = []
    if _left(place, "slots") <= 0:
        lacking.append("slots")
    for resource in RESOURCES:
        if getattr(capacity, resource) != UNKNOWN and _left(place, resource) < getattr(
            need, resource
        ):
            lacking.append(resource)
    if not lacking and any(
        getattr(capacity, resource) != UNKNOWN
        and _left(place, resource) - getattr(held, resource) < getattr(need, resource)
        for resource in Amounts._fields
    ):
        lacking.append("reserved")
    return lacking


def _too_small(place: PlaceState, need: Amounts) -> str | None:
    """The first resource ``place`` has too little of, even with nothing running."""
    for resource in Amounts._fields:
        have = getattr(place.capacity, resource)
        if have != UNKNOWN and have < getattr(need, resource):
            return resource
    return None


def _shortfall(place: PlaceState, need: Amounts, asks_one_kind: bool) -> str:
    """What ``place`` lacks, as a phrase: "all 4 slots busy", "1 of 4 GPUs free", ..."""
    small = _too_small(place, need)
    if small is not None:
        return f"too small ({_amount(getattr(place.capacity, small), small)})"
    if place.paused:
        return "stopping" if place.stopping else "not answering"
    lacking = _shortages(place, need)
    if not lacking:
        return "has room now"
    first = lacking[0]
    if first == "slots":
        return _slots_busy(place.worker)
    if first == "reserved":
        return "held for an earlier request"
    unit = "" if asks_one_kind else f" {_UNITS[first]}"
    return f"{_left(place, first)} of {getattr(place.capacity, first)}{unit} free"


def _slots_busy(worker: Worker) -> str:
    if worker.pipeline:
        return f"all {worker.slots} slots busy and {worker.pipeline} calls sent ahead"
    return f"all {worker.slots} slots busy"


def _detail(place: PlaceState, need: Amounts, asks_one_kind: bool) -> str:
    return f"{place.worker.name}: {_shortfall(place, need, asks_one_kind)}"


def _busy(
    label: str | None, need: Amounts, places: Sequence[PlaceState], engine: bool
) -> tuple[str, Counter[str]]:
    asks_one_kind = len(_asked(need)) <= 1
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


def _largest(places: Sequence[PlaceState], profiles: Sequence[Profile], resource: str) -> int:
    sizes = [int(getattr(p.capacity, resource)) for p in places]
    for profile in profiles:
        amount = getattr(profile, resource)
        sizes.append(UNKNOWN if amount is None else int(amount))
    return max(sizes, default=0)


def _too_large(
    label: str | None,
    need: Amounts,
    places: Sequence[PlaceState],
    profiles: Sequence[Profile],
    engine: bool,
) -> str:
    if engine and label is None:
        for resource in RESOURCES:
            have = _largest(places, (), resource)
            if getattr(need, resource) > have:
                return f"needs {_amount(getattr(need, resource), resource)}; the engine has {have}"
        return f"needs {describe_need(need)}; the engine has no slot for it"
    which = "worker or profile" if profiles else "worker"
    where = f"{which} with {label!r}"
    pool = () if engine else places
    for resource in RESOURCES:
        have = _largest(pool, profiles, resource)
        wanted = getattr(need, resource)
        if wanted > have:
            return f"needs {_amount(wanted, resource)}; the largest {where} has {have}"
    return f"needs {describe_need(need)} on one machine; no {where} has all of that"


def render(
    *,
    kind: WaitKind,
    label: str | None,
    need: Amounts,
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
        # Why no more machines come for it: each profile that could bring one is at its
        # cap with none under way, and says why (max_workers, the site's limit, a pause).
        capped = [
            p for p in profiles
            if p.at_cap and not p.provisioning.under_way and p.provisioning.said
        ]  # fmt: skip
        if capped and len(capped) == len(profiles):
            text += f"; provisioning {capped[0].key}, {capped[0].provisioning.said}"
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
    """The reason of a request waiting for ``profile``: the provisioning side's sentence,
    with the time left until it tries again when it counts down.

    None while the provisioning side has said nothing of it yet (the pass that asks comes
    first).
    """
    state = profile.provisioning
    if state.said is None:
        return None
    said = state.said
    if state.counting_down and state.resting_until is not None and now is not None:
        said += f"; trying again in {max(0.0, state.resting_until - now):.0f} s"
    return WaitReason(
        WaitKind.PROVISIONING, f"provisioning {profile.key}, {said}", provisioning=profile.key
    )


def walltime(
    label: str | None,
    limit: float | None,
    *,
    places: Sequence[PlaceState],
    profiles: Sequence[Profile],
    now: float | None,
    margin: float,
) -> WaitReason:
    """A request whose places' batch jobs all end too soon, and no profile lasts longer."""
    ending = sorted(
        (p for p in places if p.worker.ends_at is not None), key=lambda p: p.worker.name
    )
    lefts = [
        f"{p.worker.name}'s job ends in {max(0.0, p.worker.ends_at - now):.0f} s"
        if now is not None and p.worker.ends_at is not None
        else f"{p.worker.name}'s job ends"
        for p in ending[:_MAX_DETAILS]
    ]
    if len(ending) > _MAX_DETAILS:
        lefts.append(f"and {len(ending) - _MAX_DETAILS} more")
    walltimes = [p.walltime_s for p in profiles if p.walltime_s is not None]
    if walltimes and len(walltimes) == len(profiles):
        which = "profile" if len(walltimes) == 1 else "profiles"
        allow = "allows" if len(walltimes) == 1 else "allow"
        lefts.append(f"the {which} with {label!r} {allow} at most {max(walltimes):g} s")
    where = "; ".join(lefts) or f"every worker with {label!r} runs in a job that ends"
    if limit is None:
        notices = [p.worker.notice_s for p in ending]
        notices += [p.notice_s for p in profiles if p.walltime_s is not None]
        notice = max(notices, default=0.0)
        last = f"in its last {margin:g} s"
        if notice:  # a call placed there would be told at once to stop
            last = f"within its {margin:g} s margin and the {notice:g} s notice its calls get"
        text = f"sets no limit, and every job that could run it is {last} ({where})"
    else:
        text = f"needs up to {limit:g} s (+{margin:g} s to spare); {where}"
    return WaitReason(WaitKind.WALLTIME, text)


def _containers_of(name: str, containers: Containers | None) -> str:
    if containers is None:
        return f"{name} runs no containers"
    allowed = ", ".join(repr(i) for i in containers.images[:_MAX_DETAILS])
    return f"{name} allows {allowed} ({containers.runtime})"


def _asked_image(container: Container) -> str:
    runtime = f" with {container.runtime}" if container.runtime else ""
    return f"image {container.image!r}{runtime}"


def no_image(
    label: str | None,
    container: Container,
    places: Sequence[PlaceState],
    profiles: Sequence[Profile],
) -> WaitReason:
    """A request in a container that no worker carrying its label, and no profile offering
    it, may run: what each allows, and how to allow it."""
    which = [_containers_of(p.worker.name, p.worker.containers) for p in places[:_MAX_DETAILS]]
    which += [_containers_of(f"profile {p.key}", p.containers) for p in profiles[:_MAX_DETAILS]]
    if not which:
        which = ["none is attached"]
    text = (
        f"no worker may run {_asked_image(container)}; of those with {label!r}:"
        f" {'; '.join(which)} (a worker runs it when started with --containers and an"
        " --allow-image that matches it)"
    )
    return WaitReason(WaitKind.NO_WORKER, text)


def _never_here(request: CallRequest, place: PlaceState) -> str | None:
    """Why ``request`` may never run on ``place``, whatever it has free; None: it may."""
    name = place.worker.name
    if request.label is not None and request.label not in place.worker.labels:
        return f"{name} does not carry label {request.label!r}"
    if request.label is None and place.groups != (None,):
        return "requests without a label run on the engine"
    if request.container is not None and not may_run(place.worker.containers, request.container):
        said = _containers_of(name, place.worker.containers)
        return f"it runs in {_asked_image(request.container)}, and {said}"
    return None


def explain_place(request: CallRequest, need: Amounts, place: PlaceState) -> str:
    """Why ``request`` is not running on ``place`` right now."""
    name = place.worker.name
    never = _never_here(request, place)
    if never is not None:
        return never
    small = _too_small(place, need)
    if small is not None:
        return (
            f"{name} is too small: it has {_amount(getattr(place.capacity, small), small)},"
            f" the request needs {_amount(getattr(need, small), small)}"
        )
    if place.stopping:
        return f"{name} is stopping (its worker was told to stop); it is given nothing new"
    if place.paused:
        return f"{name} is not answering; it is given nothing new until it does"
    if not _shortages(place, need):
        return f"{name} could run it; it starts at the next pass"
    return f"{name}: {_shortfall(place, need, False)}; the request needs {describe_need(need)}"
