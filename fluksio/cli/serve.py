"""``fluksio serve``: run the engine in the foreground."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import click

from fluksio.api.proxies import parse_public_url, parse_trusted_proxies
from fluksio.api.server import data_dir_lock, run_engine
from fluksio.cli.options import data_dir_option
from fluksio.engine.datadir import DataDir
from fluksio.engine.db import open_database
from fluksio.engine.logging import configure_logging, register_secret
from fluksio.engine.provisioning import load_configured
from fluksio.engine.settings import EngineSettings
from fluksio.engine.users import NewSuperuser, UserStore, bootstrap_superuser

__all__ = ["serve"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Certificate chain (PEM): serve HTTPS and WSS on the one port.",
)
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The certificate's private key (PEM).",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="Serve plain HTTP on an address other than loopback (a TLS proxy in front).",
)
@click.option(
    "--public-url",
    default=None,
    metavar="URL",
    help="The engine as workers and browsers reach it, behind a proxy"
    " (https://fluksio.example.com): the attach command shown, and where workers find"
    " artifacts.",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="ADDRESS",
    help="A reverse proxy (address or network, repeatable) whose X-Forwarded-For names"
    " the real client, for login throttling and logs.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port to listen on; 0 picks a free one (written to DATA_DIR/engine.json).",
)
@data_dir_option
@click.option(
    "--engine-slots",
    type=click.IntRange(0, 4096),
    default=None,
    help="Node calls the engine runs at once itself (default: two per core).",
)
@click.option(
    "--node-python",
    default=None,
    help="Interpreter for node code run on the engine (default: the engine's own).",
)
@click.option(
    "--runner-mode",
    type=click.Choice(["auto", "fork", "spawn"]),
    default="auto",
    show_default=True,
    help="How call processes start: a fork server where it works, or a fresh interpreter.",
)
@click.option("--worker-gone-s", type=click.FloatRange(0.1), default=90.0, hidden=True)
@click.option("--worker-take-s", type=click.FloatRange(0.1), default=15.0, hidden=True)
@click.option("--worker-check-s", type=click.FloatRange(0.05), default=2.0, hidden=True)
@click.option(
    "--walltime-margin-s",
    type=click.FloatRange(0),
    default=60.0,
    show_default=True,
    help="Time to spare before a worker's batch job ends: a call goes there only if its"
    " limit and this fit; an idle worker with less left is let go.",
)
@click.option(
    "--max-frame-bytes",
    type=click.IntRange(1024),
    default=64 * 1024 * 1024,
    show_default=True,
    help="The largest frame a worker may send (a call's answer with its result).",
)
@click.option(
    "--worker-frames-per-s",
    type=click.FloatRange(1),
    default=5000.0,
    show_default=True,
    help="A worker sending more frames a second than this (after a burst of ten times"
    " as many) is disconnected as flooding.",
)
@click.option(
    "--max-artifact-bytes",
    type=click.IntRange(1),
    default=10 * 1024**3,
    show_default=True,
    help="The largest artifact upload the engine takes; a larger one is refused (413).",
)
@click.option(
    "--event-buffer",
    type=click.IntRange(10),
    default=10_000,
    show_default=True,
    help="Events the live feed keeps for subscribers that reconnect; one further behind"
    " is told to fetch its views again.",
)
@click.option(
    "--event-buffer-bytes",
    type=click.IntRange(1 << 20),
    default=64 << 20,
    show_default=True,
    help="The most text (bytes) the live feed keeps, however few events that is; the"
    " oldest leave first.",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
)
def serve(
    *,
    host: str,
    tls_cert: Path | None,
    tls_key: Path | None,
    insecure: bool,
    public_url: str | None,
    trusted_proxies: tuple[str, ...],
    port: int,
    data_dir: Path,
    engine_slots: int | None,
    node_python: str | None,
    runner_mode: str,
    worker_gone_s: float,
    worker_take_s: float,
    worker_check_s: float,
    walltime_margin_s: float,
    max_frame_bytes: int,
    worker_frames_per_s: float,
    max_artifact_bytes: int,
    event_buffer: int,
    event_buffer_bytes: int,
    log_level: str,
) -> None:
    """Run the engine until interrupted."""
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
    register_secret(os.environ.get("FLUKSIO_SUPERUSER_PASSWORD"))
    layout = DataDir(data_dir).ensure()
    # A bad provisioners.json stops here, with one sentence, before anything starts.
    provisioners = load_configured(layout)
    with data_dir_lock(layout):
        database = open_database(layout.database)
        try:
            created = bootstrap_superuser(UserStore(database))
        finally:
            database.close()
        settings = EngineSettings(
            data_dir=data_dir,
            host=host,
            port=port,
            tls_cert=tls_cert,
            tls_key=tls_key,
            insecure=insecure,
            public_url=public_url,
            trusted_proxies=trusted_proxies,
            engine_slots=engine_slots,
            node_python=node_python,
            runner_mode=runner_mode,
            worker_gone_s=worker_gone_s,
            worker_take_s=worker_take_s,
            worker_check_s=worker_check_s,
            walltime_margin_s=walltime_margin_s,
            max_frame_bytes=max_frame_bytes,
            worker_frames_per_s=worker_frames_per_s,
            worker_frame_burst=10 * worker_frames_per_s,
            max_artifact_bytes=max_artifact_bytes,
            event_buffer=event_buffer,
            event_buffer_bytes=event_buffer_bytes,
        )
        asyncio.run(
            run_engine(
                settings,
                on_ready=lambda url: _banner(url, layout, created),
                provisioners=provisioners,
            )
        )


def _banner(url: str, layout: DataDir, created: NewSuperuser | None) -> None:
    # Printed to stdout, never logged: the generated password appears here once only.
    api = f"{url}/api/v1"
    lines = [f"Fluksio engine listening on {url} (API {api}); data in {layout.root}"]
    if created is not None:
        lines.append(f"Created the superuser {created.username!r}.")
        if created.generated_password is not None:
            register_secret(created.generated_password)
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
