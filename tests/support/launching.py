"""The launcher as the runner tests use it: in both modes, with an environment full of
what must never reach a node, and a one-line way to run a node's source."""

from __future__ import annotations

import os
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import pytest

from fluksio.agent.calls import Notice
from fluksio.agent.launcher import Launcher
from fluksio.agent.protocol.frames import LogFrame, ProgressFrame, RunFrame

__all__ = ["launcher", "node", "run"]


@pytest.fixture(params=["fork", "spawn"])
async def launcher(request: pytest.FixtureRequest) -> AsyncIterator[Launcher]:
    environ = dict(
        os.environ,
        MY_API_TOKEN="leak-me-not",
        AWS_SECRET_ACCESS_KEY="nope",
        FLUKSIO_WORKER_TOKEN="worker-token",
        HARMLESS_SETTING="visible",
        DATABASE_URL="postgres://u:pw@db.example/app",
        X_CONNECTION_STRING="Server=db;Password=pw",
        PGPASSFILE="/home/u/.pgpass",
        HTTP_PROXY="http://u:pw@proxy.example:3128",
        https_proxy="http://token@proxy.example:3128",
        NO_PROXY="localhost,127.0.0.1",
        DOCS_URL="https://docs.example/guide",
    )
    launched = Launcher(mode=request.param, environ=environ)
    await launched.start()
    assert launched.mode == request.param
    yield launched
    await launched.close()


def node(source: str) -> str:
    return textwrap.dedent(source).lstrip()


async def run(launcher: Launcher, source: str, **fields: Any) -> Any:
    """Run ``source``'s node with the run frame's ``fields``; ``notice_s`` (the worker's
    ``--notice-s``) makes it a call that runs until its job's end, its ``limit``."""
    events: list[ProgressFrame | LogFrame] = []
    notice_s = fields.pop("notice_s", None)
    if notice_s is not None:
        launcher.notice = Notice(notice_s)
        fields["until_job_end"] = True
    spec = RunFrame(
        call_id=fields.pop("call_id", "c1"), source=node(source), node="n", flow="f", **fields
    )
    outcome = await launcher.run(spec, events.append)
    return outcome, events
