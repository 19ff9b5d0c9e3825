"""A node's output as ``fluksio runs logs`` prints it: from a position, resumed exactly.

The engine numbers an attempt's lines from 0; each answer says where to ask next
(``next``), so a follower whose connection drops asks again from there: no line twice,
and none missed without a line saying how many.
"""

from __future__ import annotations

import time

import click

from fluksio.client.client import Client
from fluksio.wire.answers.runs import NodeLogs
from fluksio.wire.states import TERMINAL_NODE_STATES

__all__ = ["print_logs"]

WAIT_S = 25
"""How long the engine holds each request while nothing new comes."""
_PENDING_S = 1.0
"""While an ended attempt's node waits to start its next: how often to look."""


def print_logs(
    client: Client, run_id: str, node: str, *, follow: bool, prefix: bool, item: int | None = None
) -> None:
    """Print the node's lines (``[node] `` before each with ``prefix``), every attempt's
    from the first (``--- attempt 2 ---`` between them): as they are, or, with ``follow``,
    as they come, to the end."""
    lead = f"[{node}] " if prefix else ""
    attempt = 1
    position = 0
    while True:
        answer = _ask(client, run_id, node, item, start=position, attempt=attempt, follow=follow)
        if answer.missed:
            click.echo(f"{lead}[... {answer.missed} lines not kept ...]")
        for line in answer.lines:
            click.echo(f"{lead}{line}")
        position, attempt = answer.next, answer.attempt
        if answer.ended and answer.attempt < answer.latest_attempt:
            attempt, position = answer.attempt + 1, 0
            click.echo(f"{lead}--- attempt {attempt} ---")
        elif not follow:
            if answer.ended or not answer.lines:
                return
        elif answer.ended and answer.state in TERMINAL_NODE_STATES:
            return
        elif answer.ended:
            time.sleep(_PENDING_S)  # its next attempt is not queued yet (a back-off)


def _ask(
    client: Client,
    run_id: str,
    node: str,
    item: int | None,
    *,
    start: int,
    attempt: int | None,
    follow: bool,
) -> NodeLogs:
    """One answer; following, held up to :data:`WAIT_S`, and asked again while the engine
    is away (a dropped connection, a restart) for as long as the client rides over it."""

    def ask() -> NodeLogs:
        wait = WAIT_S if follow else 0
        return client.logs(run_id, node, item=item, start=start, attempt=attempt, wait=wait)

    return client.riding(ask) if follow else ask()
