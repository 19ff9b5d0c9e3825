"""``fluksio provisioners``: check provisioners.json, and log in where a site asks for a code.

``check`` validates the file, lists its profiles, prints a job script, or (``--ssh``)
proves access and shows how the login node was reached. ``login`` opens the shared
connection the engine then uses, in the person's own terminal. ``status`` asks the
running engine how each profile stands; ``pause`` and ``resume`` stop and start its asking
for one profile.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from pathlib import Path
from typing import Any

import click

from fluksio.cli.client import client_from_environment
from fluksio.cli.context import url_option
from fluksio.cli.local.options import data_dir_option
from fluksio.cli.tables import json_text, table
from fluksio.engine.datadir import DataDir
from fluksio.engine.provisioning import instantiate
from fluksio.errors import ConfigError
from fluksio.provisioners.base import ProvisionError
from fluksio.provisioners.config import load_provisioners
from fluksio.provisioners.login import shared_login
from fluksio.provisioners.machine.requests import login_sentence
from fluksio.provisioners.plugins import build_plugins
from fluksio.provisioners.provisioner import Provisioner

__all__ = ["provisioners"]


@click.group()
def provisioners() -> None:
    """Provisioners: machines the engine may ask batch schedulers for."""


@provisioners.command()
@data_dir_option
@click.option(
    "--file",
    "file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The file to check (default: DATA_DIR/provisioners.json).",
)
@click.option(
    "--script",
    metavar="PROVISIONER/PROFILE",
    default=None,
    help="Print the exact job script that profile would submit.",
)
@click.option(
    "--ssh",
    "prove_access",
    is_flag=True,
    help="Also log in to each provisioner's system, show how (transport, config entry,"
    " jump host) and what it says (Slurm: sinfo).",
)
@click.option(
    "--submit",
    "try_submitting",
    is_flag=True,
    help="Also submit a held test job of each profile and withdraw it at once: what the"
    " site refuses (a partition, an account, a QOS, a time limit) shows now, not at the"
    " first need.",
)
def check(
    data_dir: Path, file: Path | None, script: str | None, prove_access: bool, try_submitting: bool
) -> None:
    """Validate provisioners.json, list its profiles, optionally print a job script."""
    path, provisioners = _configured(data_dir, file)
    if script is None:
        detected = False
        for provisioner in provisioners:
            settings = provisioner.settings
            click.echo(f"{settings.name} ({provisioner.type_name}):")
            click.echo(f"  workers reach the engine {provisioner.reach()}")
            for profile in settings.profiles:
                given = (("cpus", profile.cpus), ("gpus", profile.gpus), ("ram_mb", profile.ram_mb))
                detected |= any(amount is None for _, amount in given)
                amounts = " ".join(
                    f"{name}={'as detected' if amount is None else amount}"
                    for name, amount in given
                )
                labels = ",".join(profile.labels) or "-"
                scale = f"max_workers={profile.max_workers} parallel={profile.worker_parallel}"
                walltime = provisioner.walltime_s(profile)
                scale += f" walltime={walltime:g}s" if walltime is not None else " walltime=none"
                click.echo(f"  {profile.name}: {amounts} labels={labels} {scale}")
        if detected:
            click.echo(
                "as detected: not set in the profile, so the worker reports what it finds on"
                " its machine (its cores, its GPU devices, its memory)"
            )
        if prove_access:
            asyncio.run(_prove_access(provisioners))
        if try_submitting:
            asyncio.run(_try_submissions(provisioners))
        return
    wanted, _, profile_name = script.partition("/")
    provisioner = _named(provisioners, wanted, path, "--script")
    try:
        profile = provisioner.profile(profile_name)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    # A real request's id is random, one per job.
    click.echo(provisioner.render(profile, request_id="EXAMPLE"), nl=False)


@provisioners.command()
@data_dir_option
@click.argument("name")
def login(data_dir: Path, name: str) -> None:
    """Log in to provisioner NAME's login node here, once, for the engine to share.

    For sites that ask for a one-time code: the code is typed here, and the engine (with
    the same data directory) then submits and polls through this connection without
    asking. Needs "transport": "openssh".
    """
    path, provisioners = _configured(data_dir, None)
    provisioner = _named(provisioners, name, path, "NAME")
    login = shared_login(provisioner)
    argv = login.login_argv() if login is not None else None
    if login is None or argv is None:
        raise ConfigError(
            f'provisioner {name!r} cannot share a login; set "transport": "openssh" in'
            f" {path} (the asyncssh transport logs in by itself, with keys)"
        )
    if asyncio.run(login.logged_in()):
        click.echo(f"{name}: already logged in; 'fluksio provisioners logout {name}' ends it")
        return
    # The person's terminal: ssh asks there for what the login node wants. SIGHUP ignored
    # (and so in ssh): where this command leads its terminal's session (ssh -t host
    # fluksio ...), its exit hangs the terminal up before ssh's background half has left it.
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        status = subprocess.run(argv, check=False).returncode
    finally:
        signal.signal(signal.SIGHUP, previous)
    if status != 0:
        raise ProvisionError(f"{name}: the login did not succeed (ssh said why above)")
    asyncio.run(_prove_access([provisioner], quiet=True))
    click.echo(
        f"{name}: logged in; the engine shares this connection until it drops"
        f" (run 'fluksio provisioners check --ssh' to see it)"
    )


@provisioners.command()
@data_dir_option
@click.argument("name")
def logout(data_dir: Path, name: str) -> None:
    """Close provisioner NAME's shared connection; the engine then needs a new login
    (where a key alone will not do) before it can submit again."""
    path, provisioners = _configured(data_dir, None)
    provisioner = _named(provisioners, name, path, "NAME")
    login = shared_login(provisioner)
    closed = login is not None and asyncio.run(login.logout())
    click.echo(f"{name}: logged out" if closed else f"{name}: no shared connection was open")


@provisioners.command()
@url_option
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print what the engine answered, as JSON.")
def status(url: tuple[str, ...], data_dir: Path, as_json: bool) -> None:
    """How each profile stands on the running engine: its jobs, its pending request, its
    last error (credentials from $FLUKSIO_TOKEN or $FLUKSIO_USERNAME/PASSWORD)."""
    blocks = client_from_environment(url, data_dir).resources().provisioners
    if as_json:
        click.echo(json_text(blocks))
        return
    if not blocks:
        click.echo("No provisioners configured.")
        return
    rows = []
    for block in blocks:
        for profile in block.profiles:
            pending = profile.outstanding
            if profile.paused:
                standing = profile.paused
            elif profile.path_down:
                standing = profile.path_down
            elif profile.login_needed:
                standing = profile.login_needed
            elif pending is not None:
                job = f"job {pending.job_id} " if pending.job_id else ""
                standing = f"{job}{pending.state or pending.stage}"
            elif profile.site_limit:
                # What the site allows (or refuses) is why nothing more goes out.
                standing = f"site: {profile.site_limit}"
            else:
                standing = "-"
            error = profile.last_error
            rows.append(
                [
                    f"{block.name}/{profile.name}",
                    f"{len(profile.jobs)}/{profile.max_workers}",
                    str(len(profile.workers)),
                    standing,
                    error.message if error else "-",
                ]
            )
    table(rows, ["PROFILE", "JOBS", "WORKERS", "PENDING", "LAST ERROR"])


@provisioners.command()
@url_option
@data_dir_option
@click.argument("profile", metavar="PROVISIONER/PROFILE")
def pause(url: tuple[str, ...], data_dir: Path, profile: str) -> None:
    """Ask nothing of PROVISIONER/PROFILE until it is resumed (a planned maintenance);
    its jobs already submitted stay. The pause outlasts the engine (superuser)."""
    provisioner, name = _profile_named(profile)
    answer = client_from_environment(url, data_dir).pause_profile(provisioner, name)
    click.echo(f"{profile}: {answer.paused}")


@provisioners.command()
@url_option
@data_dir_option
@click.argument("profile", metavar="PROVISIONER/PROFILE")
def resume(url: tuple[str, ...], data_dir: Path, profile: str) -> None:
    """Resume PROVISIONER/PROFILE, paused by a person or by itself after failures in a
    row: a call waiting for it asks at once (superuser)."""
    provisioner, name = _profile_named(profile)
    client_from_environment(url, data_dir).resume_profile(provisioner, name)
    click.echo(f"{profile}: resumed; a call that needs it asks for a machine at once")


def _profile_named(given: str) -> tuple[str, str]:
    provisioner, _, name = given.partition("/")
    if not provisioner or not name or "/" in name:
        raise ConfigError(f"PROVISIONER/PROFILE: {given!r} is not of the form hpc/cpu")
    return provisioner, name


def _configured(data_dir: Path, file: Path | None) -> tuple[Path, list[Provisioner[Any, Any]]]:
    plugins = build_plugins()
    for failure in plugins.failures:
        click.echo(f"plugin {failure.name!r} was left out: {failure.error}", err=True)
    layout = DataDir(data_dir)
    path = file or layout.provisioners
    if not path.exists():
        raise ConfigError(f"{path} does not exist")
    try:
        loaded = load_provisioners(path, plugins.provisioner_types())
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return path, instantiate(layout, loaded)


def _named(
    provisioners: list[Provisioner[Any, Any]], name: str, path: Path, what: str
) -> Provisioner[Any, Any]:
    for provisioner in provisioners:
        if provisioner.name == name:
            return provisioner
    known = ", ".join(p.name for p in provisioners) or "none"
    raise ConfigError(f"{what}: no provisioner named {name!r} in {path} (configured: {known})")


async def _prove_access(provisioners: list[Provisioner[Any, Any]], *, quiet: bool = False) -> None:
    failed = []
    for provisioner in provisioners:
        try:
            said = await provisioner.check()
        except ProvisionError as exc:
            said = f"{provisioner.name}: {exc}"
            failed.append(
                f"{said}; {login_sentence(provisioner.name)}" if exc.login_needed else said
            )
            continue
        finally:
            await provisioner.close()
        if quiet:
            continue
        click.echo(f"{provisioner.name}: access works")
        for line in said.strip().splitlines():
            click.echo(f"  {line}")
    if failed:
        raise ConfigError("; ".join(failed))


async def _try_submissions(provisioners: list[Provisioner[Any, Any]]) -> None:
    """Each profile's held test job, submitted and withdrawn; every refusal said, then
    one error naming the profiles refused."""
    refused = []
    for provisioner in provisioners:
        try:
            for profile in provisioner.settings.profiles:
                key = f"{provisioner.name}/{profile.name}"
                try:
                    said = await provisioner.try_submission(profile)
                except ProvisionError as exc:
                    refused.append(key)
                    click.echo(f"{key}: {exc}")
                    continue
                click.echo(f"{key}: {said or 'nothing to submit for this type'}")
        finally:
            await provisioner.close()
    if refused:
        raise ConfigError(f"the site refused a test job of {', '.join(refused)} (said above)")
