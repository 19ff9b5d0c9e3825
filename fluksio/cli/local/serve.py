"""``fluksio serve``: run the engine in the foreground."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any

import click

from fluksio.api.proxies import parse_public_url, parse_trusted_proxies
from fluksio.api.server import run_engine
from fluksio.cli.local.options import settings_options
from fluksio.engine.datadir import DataDir
from fluksio.engine.holding import STOP_WITHIN_S, DataDirBusy, data_dir_lock
from fluksio.engine.provisioning import load_configured
from fluksio.engine.settings import EngineSettings
from fluksio.engine.state import open_state
from fluksio.engine.users import NewSuperuser, UserStore, bootstrap_superuser
from fluksio.logs import LogSecrets, configure_logging

__all__ = ["serve"]


@click.command()
@settings_options
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
def serve(*, log_level: str, **values: Any) -> None:
    """Run the engine until interrupted."""
    public_url, trusted_proxies = values["public_url"], values["trusted_proxies"]
    try:
        public_url = parse_public_url(public_url) if public_url is not None else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--public-url") from None
    try:
        parse_trusted_proxies(trusted_proxies)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--trusted-proxy") from None
    configure_logging(level=log_level)
    # Known secrets are blanked wherever they would appear in a log line.
    log_secrets = LogSecrets(os.environ.get("FLUKSIO_SUPERUSER_PASSWORD"))
    layout = DataDir(values["data_dir"]).ensure()
    # A bad provisioners.json stops here, with one sentence, before anything starts.
    provisioners = load_configured(layout)
    with contextlib.ExitStack() as held:
        _hold(held, layout)
        settings = EngineSettings(**{**values, "public_url": public_url})
        database = open_state(settings, layout).database
        try:
            created = bootstrap_superuser(UserStore(database))
        finally:
            database.close()
        asyncio.run(
            run_engine(
                settings,
                on_ready=lambda url: _banner(url, layout, created, log_secrets),
                provisioners=provisioners,
                log_secrets=log_secrets,
            )
        )


def _hold(held: contextlib.ExitStack, layout: DataDir) -> None:
    """Take the data directory's lock into ``held``. One an engine that is stopping still
    holds is waited for (it lets go within its stop bound, a little more on a loaded
    machine), so a restart right after a stop starts; any other holder is refused."""
    deadline = time.monotonic() + STOP_WITHIN_S + _SPARE_S
    told = False
    while True:
        try:
            held.enter_context(data_dir_lock(layout))
            return
        except DataDirBusy as busy:
            if not busy.stopping or time.monotonic() >= deadline:
                raise
            if not told:
                click.echo(f"waiting for the engine (pid {busy.pid}) that is stopping", err=True)
                told = True
        time.sleep(0.1)


_SPARE_S = 5.0
"""Waited past a stopping engine's bound before giving up on it."""


def _banner(
    url: str, layout: DataDir, created: NewSuperuser | None, log_secrets: LogSecrets
) -> None:
    # Printed to stdout, never logged: the generated password appears here once only.
    api = f"{url}/api/v1"
    lines = [f"Fluksio engine listening on {url} (API {api}); data in {layout.root}"]
    if created is not None:
        lines.append(f"Created the superuser {created.username!r}.")
        if created.generated_password is not None:
            log_secrets.add(created.generated_password)
            lines.append(f"Its password, shown only this once: {created.generated_password}")
        lines += [
            "Log in (the password is read from stdin, so it stays out of process listings):",
            f"  curl -s -d username={created.username} --data-urlencode password@- "
            f"{api}/login/access-token",
            "Mint a worker token with the CLI:",
            f"  export FLUKSIO_URL={api} FLUKSIO_USERNAME={created.username}",
            "  read -rs FLUKSIO_PASSWORD && export FLUKSIO_PASSWORD",
            "  fluksio tokens mint my-gpu-box --labels gpu",
        ]
    click.echo("\n".join(lines), nl=True)
