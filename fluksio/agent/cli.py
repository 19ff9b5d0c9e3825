"""``fluksio-worker`` (also ``fluksio worker``): attach this machine to an engine.

Exit codes: 0 when it stopped by itself (``--max-idle``), 2 for a usage error (one
sentence), 3 when the engine refused it (retrying could not help), 1 otherwise.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import os
import signal
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from fluksio.agent import __version__
from fluksio.agent.attaching import AgentConfig
from fluksio.agent.calls import Notice, fitted_notice
from fluksio.agent.clock import SystemClock
from fluksio.agent.containers import RUNTIMES, ContainerError
from fluksio.agent.containers.calls import ContainerCalls
from fluksio.agent.inventory import detect_inventory
from fluksio.agent.launcher import Launcher, LauncherError
from fluksio.agent.protocol.frames import MAX_PIPELINE
from fluksio.agent.secrecy import hide_token
from fluksio.agent.session import Agent
from fluksio.agent.settings import WorkerSettings, worker_options
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
@worker_options
def main(**values: Any) -> None:
    """Attach this machine to a Fluksio engine and run the node calls it sends."""
    settings = WorkerSettings(**values)
    config, launcher = _configured(settings)
    sys.exit(asyncio.run(_serve(config, launcher)))


def _configured(given: WorkerSettings) -> tuple[AgentConfig, Launcher]:
    """What the options say, read and checked: each bad one is a usage error."""
    try:
        attach_url, *others = (
            parse_attach_url(url, insecure=given.insecure, artifact_url=given.artifact_url)
            for url in given.url
        )
        route = (
            parse_connect_to(given.connect_to, attach_url.websocket) if given.connect_to else None
        )
    except UrlError as exc:
        raise _UsageError(str(exc)) from None
    if not given.token:
        raise _UsageError("no worker token: set FLUKSIO_WORKER_TOKEN or pass --token")
    # Before anything is started: no call, nor anything else of this user, reads it.
    hide_token(given.token)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    try:
        job_end = detect_job_end(os.environ, given.ends_at)
    except ValueError:
        raise _UsageError(
            f"--ends-at: {given.ends_at!r} is not a time (a Unix time, or ISO 8601)"
        ) from None
    try:
        trust = tls_trust(given.ca_file)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
        raise _UsageError(
            f"--ca-file: {given.ca_file} cannot be read as PEM certificates ({reason})"
        ) from None
    inventory = detect_inventory(
        dev_dir=given.dev_dir, cpus=given.cpus, gpus=given.gpus, ram_mb=given.ram_mb
    )
    parallel, pipeline = given.parallel, given.pipeline
    config = AgentConfig(
        settings=given,
        url=attach_url,
        token=given.token,
        # The host's short name: a fully qualified one may be longer than a name can be.
        name=given.name or socket.gethostname().split(".")[0][:63],
        labels=_labels(given.labels),
        inventory=inventory,
        pipeline=min(MAX_PIPELINE, 2 * parallel) if pipeline is None else pipeline,
        # A short job's calls are told in time too: the notice fits the job by default.
        notice_s=fitted_notice(None if job_end is None else job_end - SystemClock().now())
        if given.notice_s is None
        else given.notice_s,
        slurm_job_id=os.environ.get("SLURM_JOB_ID"),
        ends_at=job_end,
        # The runner's artifact transfers trust what the agent trusts.
        extra_env={
            "FLUKSIO_ARTIFACT_URL": attach_url.artifacts,
            **({"FLUKSIO_CA_FILE": str(Path(given.ca_file).resolve())} if given.ca_file else {}),
            **({"FLUKSIO_CONNECT_TO": route.as_env()} if route is not None else {}),
        },
        route=route,
        tls=trust,
        others=tuple(others),
    )
    # A call that asks for no memory is bounded by what this worker reports it has.
    return config, Launcher(
        given.python,
        mode=given.runner_mode,
        ram_mb=inventory.ram_mb,
        containers=_containers(given, inventory.ram_mb),
        notice=Notice(config.notice_s, given.notice_signal),
    )


def _containers(given: WorkerSettings, ram_mb: int | None) -> ContainerCalls | None:
    """How calls in a container run here, as ``--containers`` and ``--allow-image`` say."""
    if given.containers is None:
        if given.allow_image:
            raise _UsageError("--allow-image: give --containers too (podman or apptainer)")
        return None
    if not given.allow_image:
        raise _UsageError(
            f"--containers {given.containers}: give the images calls may run in"
            " (--allow-image 'registry.example/*', repeatable)"
        )
    runtime = RUNTIMES[given.containers](given.allow_image)
    return ContainerCalls(runtime, dev_dir=given.dev_dir, place_ram_mb=ram_mb)


async def _serve(config: AgentConfig, launcher: Launcher) -> int:
    try:
        await launcher.start()
    except LauncherError as exc:
        raise _UsageError(f"--python: {exc}") from None
    if launcher.containers is not None:
        try:
            await launcher.containers.runtime.check()
        except ContainerError as exc:
            raise _UsageError(str(exc)) from None
        runtime = launcher.containers.runtime
        said = logging.getLogger("fluksio.agent")
        said.info(
            "calls in containers run with %s %s",
            runtime.name,
            " ".join(runtime.settings) or "(its defaults)",
        )
        if not runtime.bounds_memory:
            said.warning(
                "%s cannot bound the memory of a call's container here (rootless on"
                " cgroup v1): calls in containers are not held to their ram_mb",
                runtime.name,
            )
    config.venv_digest = await asyncio.get_running_loop().run_in_executor(
        None, _venv_digest, launcher.python
    )
    agent = Agent(config, launcher)
    stopping = functools.partial(agent.told_to_stop, "told to stop (SIGTERM)")
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping)
    try:
        return await agent.run()
    finally:
        await launcher.close()
