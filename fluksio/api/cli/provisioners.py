"""``fluksio provisioners check``: validate provisioners.json and show what it would submit."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from fluksio.api.cli.options import data_dir_option
from fluksio.api.datadir import DataDir
from fluksio.errors import ConfigError
from fluksio.provisioners.base import Provisioner, ProvisionError
from fluksio.provisioners.config import load_provisioners
from fluksio.provisioners.plugins import build_plugins

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
    help="Also log in to each provisioner's system and show what it says (Slurm: sinfo).",
)
def check(data_dir: Path, file: Path | None, script: str | None, prove_access: bool) -> None:
    """Validate provisioners.json, list its profiles, optionally print a job script."""
    plugins = build_plugins()
    for failure in plugins.failures:
        click.echo(f"plugin {failure.name!r} was left out: {failure.error}", err=True)
    path = file or DataDir(data_dir).provisioners
    if not path.exists():
        raise ConfigError(f"{path} does not exist")
    try:
        loaded = load_provisioners(path, plugins.provisioner_types())
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if script is None:
        provisioners = [kind(settings) for kind, settings in loaded]
        for provisioner in provisioners:
            settings = provisioner.settings
            click.echo(f"{settings.name} ({provisioner.type_name}):")
            for profile in settings.profiles:
                amounts = f"cpus={profile.cpus} gpus={profile.gpus} ram_mb={profile.ram_mb}"
                labels = ",".join(profile.labels) or "-"
                scale = f"max_workers={profile.max_workers} parallel={profile.worker_parallel}"
                walltime = provisioner.walltime_s(profile)
                scale += f" walltime={walltime:g}s" if walltime is not None else " walltime=none"
                click.echo(f"  {profile.name}: {amounts} labels={labels} {scale}")
        if prove_access:
            asyncio.run(_prove_access(provisioners))
        return
    wanted, _, profile_name = script.partition("/")
    for kind, settings in loaded:
        if settings.name == wanted:
            provisioner = kind(settings)
            try:
                profile = provisioner.profile(profile_name)
            except KeyError as exc:
                raise ConfigError(str(exc.args[0])) from None
            # A real request's id is random, one per job.
            click.echo(provisioner.render(profile, request_id="EXAMPLE"), nl=False)
            return
    raise ConfigError(f"--script: no provisioner named {wanted!r} in {path}")


async def _prove_access(provisioners: list[Provisioner[Any, Any]]) -> None:
    failed = []
    for provisioner in provisioners:
        try:
            said = await provisioner.check()
        except ProvisionError as exc:
            failed.append(f"{provisioner.name}: {exc}")
            continue
        finally:
            await provisioner.close()
        click.echo(f"{provisioner.name}: access works")
        for line in said.strip().splitlines():
            click.echo(f"  {line}")
    if failed:
        raise ConfigError("; ".join(failed))
