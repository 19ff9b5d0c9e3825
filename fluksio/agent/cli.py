"""``fluksio-worker`` (also ``fluksio worker``): attach this machine to an engine.

Exit codes: 0 when it stopped by itself (``--max-idle``), 2 for a usage error (one
sentence), 3 when the engine refused it (retrying could not help), 1 otherwise.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import click

from fluksio.agent import __version__
from fluksio.agent.attaching import ENGINE_AWAY_S, AgentConfig
from fluksio.agent.frames import MAX_PIPELINE
from fluksio.agent.inventory import detect_inventory
from fluksio.agent.launcher import Launcher, LauncherError
from fluksio.agent.numbers import FiniteRange
from fluksio.agent.session import Agent
from fluksio.agent.urls import UrlError, parse_attach_url, parse_connect_to, tls_trust
from fluksio.agent.walltime import detect_job_end

__all__ = ["main"]

_LABEL_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class _UsageError(click.ClickException):
    exit_code = 2


def _labels(text: str) -> list[str]:
    labels = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    for label in labels:
        if not set(label) <= _LABEL_CHARS or len(label) > 63:
            raise _UsageError(f"--labels: {label!r} is not a label (letters, digits, . _ -)")
    return labels


def _venv_digest(python: str) -> str:
    """A short digest of what is installed for ``python``, so two hosts can be compared."""
    probe = (
        "import importlib.metadata as m\n"
        "names = (f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions())\n"
        "print('\\n'.join(sorted(names)))"
    )
    try:
        listing = subprocess.run(
            [python, "-c", probe], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return hashlib.sha256(listing.encode()).hexdigest()[:16]


@click.command(name="fluksio-worker")
@click.version_option(__version__, prog_name="fluksio-worker")
@click.option(
    "--url", required=True, help="The engine's attach URL: wss://HOST/api/v1/workers/attach."
)
@click.option(
    "--token",
    envvar="FLUKSIO_WORKER_TOKEN",
    default=None,
    show_default="$FLUKSIO_WORKER_TOKEN",
    help="The worker token minted on the engine.",
)
@click.option("--name", default=None, help="How this worker shows up (default: this host's name).")
@click.option("--labels", default="", help="Comma-separated labels, each signed by the token.")
@click.option(
    "--python",
    "python",
    default=None,
    help="The interpreter node code runs on (default: this one).",
)
@click.option(
    "--parallel",
    type=click.IntRange(1, 4096),
    default=1,
    show_default=True,
    help="How many node calls it takes at once.",
)
@click.option(
    "--pipeline",
    type=click.IntRange(0, MAX_PIPELINE),
    default=None,
    help=(
        "How many more calls it takes ahead, each started as a slot frees, so that a far"
        " worker has its next call when one ends (default: twice --parallel; 0: none)."
    ),
)
@click.option(
    "--artifact-url", default=None, help="Where the artifact store is, if not beside the socket."
)
@click.option("--cpus", type=click.IntRange(0, 1 << 20), default=None, help="Cores to advertise.")
@click.option("--gpus", type=click.IntRange(0, 4096), default=None, help="GPUs to advertise.")
@click.option(
    "--ram-mb", type=click.IntRange(0, 1 << 40), default=None, help="Memory to advertise, in MB."
)
@click.option(
    "--max-idle",
    type=FiniteRange(0, 366 * 86400, min_open=True),
    default=None,
    help="Stop after this many seconds with nothing running.",
)
@click.option(
    "--engine-away-s",
    type=FiniteRange(0, 366 * 86400),
    default=ENGINE_AWAY_S,
    show_default=True,
    help="Once attached, how long to wait for an engine that went away (a restart, an"
    " upgrade) to come back; then stop what runs and exit 4. 0: for ever.",
)
@click.option(
    "--ends-at",
    envvar="FLUKSIO_WORKER_ENDS_AT",
    default=None,
    help="When this machine goes away (Unix or ISO 8601 time); in a Slurm job, its end is"
    " found by itself.",
)
@click.option(
    "--insecure", is_flag=True, help="Allow ws:// and http:// to hosts other than this one."
)
@click.option(
    "--ca-file",
    envvar="FLUKSIO_WORKER_CA_FILE",
    default=None,
    help="Also trust the CAs in this PEM file (a private CA); SSL_CERT_FILE works too.",
)
@click.option("--heartbeat", type=FiniteRange(0.05, 3600), default=10.0, hidden=True)
@click.option(
    "--runner-mode", type=click.Choice(["auto", "fork", "spawn"]), default="auto", hidden=True
)
@click.option(
    "--connect-to",
    envvar="FLUKSIO_WORKER_CONNECT_TO",
    metavar="HOST:PORT",
    help="Reach the --url's host and port at HOST:PORT instead (a relay on a login node);"
    " TLS still verifies the engine's own name. The artifact transfers take the same way.",
)
@click.option("--dev-dir", type=click.Path(path_type=Path), default=Path("/dev"), hidden=True)
@click.option(
    "--artifact-transport", type=click.Choice(["auto", "http"]), default="auto", hidden=True
)
@click.option("--report-cache/--no-report-cache", default=True, hidden=True)
def main(
    *,
    url: str,
    token: str | None,
    name: str | None,
    labels: str,
    python: str | None,
    parallel: int,
    pipeline: int | None,
    artifact_url: str | None,
    cpus: int | None,
    gpus: int | None,
    ram_mb: int | None,
    max_idle: float | None,
    engine_away_s: float,
    ends_at: str | None,
    insecure: bool,
    ca_file: str | None,
    heartbeat: float,
    runner_mode: str,
    connect_to: str | None,
    dev_dir: Path,
    artifact_transport: str,
    report_cache: bool,
) -> None:
    """Attach this machine to a Fluksio engine and run the node calls it sends."""
    try:
        attach_url = parse_attach_url(url, insecure=insecure, artifact_url=artifact_url)
        route = parse_connect_to(connect_to, attach_url.websocket) if connect_to else None
    except UrlError as exc:
        raise _UsageError(str(exc)) from None
    if not token:
        raise _UsageError("no worker token: set FLUKSIO_WORKER_TOKEN or pass --token")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    try:
        job_end = detect_job_end(os.environ, ends_at)
    except ValueError:
        raise _UsageError(
            f"--ends-at: {ends_at!r} is not a time (a Unix time, or ISO 8601)"
        ) from None
    try:
        trust = tls_trust(ca_file)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
        raise _UsageError(
            f"--ca-file: {ca_file} cannot be read as PEM certificates ({reason})"
        ) from None
    launcher = Launcher(python, mode=runner_mode)
    inventory = detect_inventory(dev_dir=dev_dir, cpus=cpus, gpus=gpus, ram_mb=ram_mb)
    config = AgentConfig(
        url=attach_url,
        token=token,
        # The host's short name: a fully qualified one may be longer than a name can be.
        name=name or socket.gethostname().split(".")[0][:63],
        labels=_labels(labels),
        parallel=parallel,
        pipeline=min(MAX_PIPELINE, 2 * parallel) if pipeline is None else pipeline,
        report_cache=report_cache,
        inventory=inventory,
        max_idle_s=max_idle,
        engine_away_s=engine_away_s or None,
        heartbeat_s=heartbeat,
        slurm_job_id=os.environ.get("SLURM_JOB_ID"),
        ends_at=job_end,
        # The runner's artifact transfers trust what the agent trusts.
        extra_env={
            "FLUKSIO_ARTIFACT_URL": attach_url.artifacts,
            **({"FLUKSIO_CA_FILE": str(Path(ca_file).resolve())} if ca_file else {}),
            **({"FLUKSIO_CONNECT_TO": route.as_env()} if route is not None else {}),
        },
        route=route,
        tls=trust,
        use_shared_store=artifact_transport == "auto",
    )
    sys.exit(asyncio.run(_serve(config, launcher)))


async def _serve(config: AgentConfig, launcher: Launcher) -> int:
    try:
        await launcher.start()
    except LauncherError as exc:
        raise _UsageError(f"--python: {exc}") from None
    config.venv_digest = await asyncio.get_running_loop().run_in_executor(
        None, _venv_digest, launcher.python
    )
    try:
        return await Agent(config, launcher).run()
    finally:
        await launcher.close()
