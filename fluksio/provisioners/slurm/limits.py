"""What Slurm's accounting allows the user's jobs: the association and QOS limits
``sacctmgr`` lists, read for each profile (its account, partition and QOS).

The login node is asked once, by :data:`ACCOUNTING_SCRIPT`; :func:`parse_accounting` reads
its answer and :func:`profile_limit` gives each profile its :class:`SiteLimit`. A site
without accounting (no ``slurmdbd``) has no such limits; that is said, not refused.

These limits count every job of the user, whoever submitted it; the engine counts its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from fluksio.provisioners.base import SiteLimit
from fluksio.provisioners.slurm.options import (
    parse_slurm_time,
    sbatch_option,
    sbatch_partitions,
    slurm_time_text,
)
from fluksio.provisioners.slurm.settings import SlurmProfile

__all__ = [
    "ACCOUNTING_SCRIPT",
    "Accounting",
    "Association",
    "Qos",
    "accounting_lines",
    "parse_accounting",
    "profile_limit",
]

_ASSOCIATION_FIELDS = "DefaultAccount,Account,Partition,DefaultQOS,MaxJobs,MaxSubmit,MaxWall"
_QOS_FIELDS = "Name,MaxWall,MaxJobsPU,MaxSubmitPU"

ACCOUNTING_SCRIPT = f"""me=$(id -un)
associations="sacctmgr -nP show user $me withassoc format={_ASSOCIATION_FIELDS}"
if ! said=$($associations 2>/dev/null); then
    # Asked again for its words alone: a warning must not mix into an answer read.
    printf 'off|%s\\n' "$($associations 2>&1 | head -n 1)"; exit 0
fi
printf '%s\\n' "$said" | sed 's/^/assoc|/'
said=$(sacctmgr -nP show qos format={_QOS_FIELDS}) || exit
printf '%s\\n' "$said" | sed 's/^/qos|/'
"""
"""Shell text for the login node, two ``sacctmgr`` calls (each costs a round trip to
slurmdbd): every line it prints is tagged (``assoc``: the user's default account and one
association; ``qos``), or it prints one ``off`` line with why there is no accounting."""


@dataclass(frozen=True)
class Association:
    """One of the user's associations: an account, maybe on one partition only."""

    account: str
    partition: str
    default_qos: str
    max_jobs: int | None
    max_submit: int | None
    max_wall_s: float | None


@dataclass(frozen=True)
class Qos:
    name: str
    max_wall_s: float | None
    max_jobs_per_user: int | None
    max_submit_per_user: int | None


@dataclass(frozen=True)
class Accounting:
    """What ``sacctmgr`` said of the user; ``off``: why there is none to read."""

    off: str | None = None
    default_account: str = ""
    associations: tuple[Association, ...] = ()
    qos: Mapping[str, Qos] = field(default_factory=dict)


def parse_accounting(stdout: str) -> Accounting:
    """:data:`ACCOUNTING_SCRIPT`'s answer; ValueError for a line it cannot read."""
    default, associations, qos = "", [], {}
    for line in stdout.splitlines():
        tag, _, rest = line.partition("|")
        fields = rest.split("|")
        if tag == "off":
            return _off(rest.strip())
        if not rest.strip():
            continue  # a section with nothing in it
        if tag == "assoc" and len(fields) == 7:
            default = default or fields[0]
            account, partition, default_qos, jobs, submit, wall = fields[1:]
            associations.append(
                Association(account, partition, default_qos, _count(jobs), _count(submit),
                            _wall(wall))
            )  # fmt: skip
        elif tag == "qos" and len(fields) == 4:
            name, wall, jobs, submit = fields
            qos[name] = Qos(name, _wall(wall), _count(jobs), _count(submit))
        else:
            raise ValueError(f"sacctmgr's answer has a line that cannot be read: {line!r}")
    return Accounting(default_account=default, associations=tuple(associations), qos=qos)


def profile_limit(accounting: Accounting, profile: SlurmProfile) -> SiteLimit:
    """What the associations and the QOS a profile's jobs run under allow them."""
    if accounting.off is not None:
        return SiteLimit()
    account = sbatch_option(profile.sbatch, "account", "A") or accounting.default_account
    partitions = sbatch_partitions(profile.sbatch)
    rows = [
        row
        for row in accounting.associations
        if row.account == account and (not row.partition or row.partition in partitions)
    ]
    named = sbatch_option(profile.sbatch, "qos", "q")
    qos_name = named or next((row.default_qos for row in rows if row.default_qos), "")
    known = accounting.qos
    if named and named not in known:
        listed = ", ".join(sorted(known)) or "none"
        return SiteLimit(
            refused=f"profile {profile.name!r} asks for QOS {named!r}, which sacctmgr does"
            f" not list (listed: {listed})"
        )
    qos = known.get(qos_name)
    counts = list(_counts(account, rows, qos))
    most = min(counts, default=None)
    return SiteLimit(
        most_jobs=most[0] if most else None,
        why_most=most[1] if most else "",
        refused=_past_wall(profile, account, rows, qos),
    )


def accounting_lines(accounting: Accounting, limits: Mapping[str, SiteLimit]) -> list[str]:
    """What ``check`` shows of the accounting: each profile's limit, or why there is none."""
    if accounting.off is not None:
        return [f"sacctmgr: no accounting to read ({accounting.off}): no association or QOS limits"]
    unlimited = "no association or QOS limit on how many of its jobs"
    return ["sacctmgr:"] + [
        f"  profile {name!r}: {limit.describe() or unlimited}" for name, limit in limits.items()
    ]


def _counts(account: str, rows: list[Association], qos: Qos | None) -> Iterator[tuple[int, str]]:
    for row in rows:
        whose = f"the association of account {account!r}" + (
            f" on partition {row.partition!r}" if row.partition else ""
        )
        if row.max_submit is not None:
            yield row.max_submit, f"{whose} allows {_jobs(row.max_submit)} (MaxSubmitJobs)"
        if row.max_jobs is not None:
            yield row.max_jobs, f"{whose} allows {_jobs(row.max_jobs, 'running ')} (MaxJobs)"
    if qos is not None and qos.max_submit_per_user is not None:
        n = qos.max_submit_per_user
        yield n, f"QOS {qos.name!r} allows {_jobs(n)} per user (MaxSubmitJobsPerUser)"
    if qos is not None and qos.max_jobs_per_user is not None:
        n = qos.max_jobs_per_user
        yield n, f"QOS {qos.name!r} allows {_jobs(n, 'running ')} per user (MaxJobsPerUser)"


def _past_wall(
    profile: SlurmProfile, account: str, rows: list[Association], qos: Qos | None
) -> str | None:
    asked = profile.time_limit_s
    walls = [(row.max_wall_s, f"the association of account {account!r}") for row in rows]
    if qos is not None:
        walls.append((qos.max_wall_s, f"QOS {qos.name!r}"))
    for most, whose in walls:
        if asked is not None and most is not None and asked > most:
            return (
                f"profile {profile.name!r} asks for jobs of {slurm_time_text(asked)}, longer"
                f" than {whose} allows (MaxWall {slurm_time_text(most)}); ask for less, or"
                " name another QOS or account"
            )
    return None


_NO_ACCOUNTING = (
    "accounting_storage plugin",  # slurm.conf names no slurmdbd
    "accounting storage is disabled",
    "not found",  # no sacctmgr on the login node at all
)


def _off(said: str) -> Accounting:
    """``sacctmgr`` failed: a site without accounting has no limits to read; any other
    failure (slurmdbd down) is an error, so that the last reading stands."""
    if any(words in said.lower() for words in _NO_ACCOUNTING):
        return Accounting(off=said)
    raise ValueError(f"sacctmgr: {said or 'failed, saying nothing'}")


def _jobs(count: int, kind: str = "") -> str:
    return f"{count} {kind}job" + ("" if count == 1 else "s")


def _count(text: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if not text.isdigit():
        raise ValueError(f"sacctmgr's answer has a job limit that is not a count: {text!r}")
    return int(text)


def _wall(text: str) -> float | None:
    return parse_slurm_time(text) if text.strip() else None
