"""``fluksio runs start FLOW`` and ``fluksio runs show ID [--follow]``: a live view.

``--follow`` reads the engine's live feed (``GET /events?run=ID``) and fetches the run
after each change of it: nothing is polled. Exit codes: 0 when the run succeeded (or,
without ``--follow``, was started or shown); 1 when a followed run failed or was
cancelled; 2 for a usage error or an engine out of reach; 3 when the engine refused.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from fluksio.cli.context import api_group, client_of
from fluksio.cli.logs import print_logs
from fluksio.cli.run_items import array_lines, items, positions, render_array, retry
from fluksio.cli.tables import json_text, table, when
from fluksio.client.client import Client
from fluksio.errors import ConfigError
from fluksio.wire.answers.runs import NodeBody, RunBody
from fluksio.wire.provenance import Provenance
from fluksio.wire.states import TERMINAL_RUN_STATES, NodeState, RunState

__all__ = ["render_run", "runs"]


_RUN_NEWS = {"ready", "refetch", "run.state", "call.state", "call.progress"}
"""Events after which the followed run is fetched again."""
_PREVIEW = 70


@api_group("Runs of flows.")
def runs() -> None: ...


runs.add_command(items)
runs.add_command(retry)


def _parse_param(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"--param takes KEY=VALUE, not {text!r}")
    try:
        return key, json.loads(raw)
    except ValueError:
        return key, raw  # not JSON: the plain string


def _preview(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"


def _node_line(node: NodeBody) -> str:
    state = node.state
    where = node.ran_on or ""
    took = f"{node.duration_s:.3f}s" if node.duration_s is not None else ""
    if state is NodeState.SUCCEEDED:
        detail = f"-> {_preview(node.result)}"
    elif state in {NodeState.FAILED, NodeState.SKIPPED, NodeState.CANCELLED} and node.error:
        detail = node.error["short"]
    elif state in (NodeState.QUEUED, NodeState.PENDING) and node.reason:
        detail = f"waiting: {node.reason}"
    elif node.sent_ahead:
        detail = "waiting for a free slot on its worker"
    elif state is NodeState.RUNNING and node.events:
        last = node.events[-1]
        detail = f"{last['event']} {_preview(last['outputs'])}"
    else:
        detail = ""
    shown = "sent ahead" if node.sent_ahead else state
    line = f"  {node.id:16} {shown:10} {where:18} {took:>9}  {detail}"
    if node.attempt > 1 and state is not NodeState.PENDING:
        line += f"\n{'':20}attempt {node.attempt} of {node.attempts}{_last_attempt(node)}"
    if node.array is not None:
        line = "\n".join([line, *array_lines(node.array, " " * 20)])
    if node.provenance is None:
        return line
    provenance = Provenance.from_json(node.provenance.model_dump())
    return f"{line}\n{'':20}on {provenance.describe()}"


def _last_attempt(node: NodeBody) -> str:
    """How its last attempt ended, as the engine noted when it began the next one."""
    ended = [e for e in node.events if e.get("event") in _NEXT_ATTEMPT]
    if not ended:
        return ""
    last, before = ended[-1], node.attempt - 1
    said = last["outputs"]
    if last["event"] == "checkpointed":
        return f" (attempt {before} checkpointed on {said.get('on')}; this one resumes it)"
    return f" (attempt {before} ended {said['after']})" if said.get("after") else ""


_NEXT_ATTEMPT = ("retried", "rerun", "interrupted", "checkpointed")


def render_run(run: RunBody) -> list[str]:
    head = f"run {run.id} of {run.flow!r}: {run.state}"
    if run.reason:
        head += f" ({run.reason})"
    return [head, *(_node_line(node) for node in run.nodes)]


def _changes(client: Client, run_id: str) -> Iterator[RunBody]:
    """The run now, then again after each change the live feed reports of it.

    Once the feed is open (``ready``) the run is fetched, so no change falls between the
    two. A dropped feed is reopened with the last event id (the client does), so none is
    missed then either; across an engine's restart, for as long as the client rides over
    its absence.
    """
    for event in client.events(run=run_id):
        if event.kind in _RUN_NEWS:
            yield client.riding(lambda: client.run(run_id))


def _follow(client: Client, run_id: str, *, live_view: bool) -> RunBody:
    live = live_view and sys.stdout.isatty()
    shown: list[str] = []
    for run in _changes(client, run_id):
        if live_view:
            lines = render_run(run)
            if live:
                if shown:
                    click.echo(f"\x1b[{len(shown)}F\x1b[J", nl=False)
                click.echo("\n".join(lines))
            else:
                # A log, read top down: after the first view, the run's own line comes after
                # the node lines that changed it ("succeeded" last, not before its node);
                # so too when the run had already ended by the first view.
                head, *nodes = lines
                ended = run.state in TERMINAL_RUN_STATES
                if not shown and not ended:
                    click.echo(head)
                for line in nodes:
                    if line not in shown:
                        click.echo(line)
                if (shown or ended) and head not in shown:
                    click.echo(head)
            shown = lines
        if run.state in TERMINAL_RUN_STATES:
            return run
    raise AssertionError("unreachable: the feed is reopened until the run ends")


def _finish(run: RunBody, follow: bool, as_json: bool, client: Client) -> None:
    if follow:
        run = _follow(client, run.id, live_view=not as_json)
    if as_json:
        click.echo(json_text(run))
    elif not follow:
        click.echo("\n".join(render_run(run)))
        node = "" if len(run.nodes) == 1 else " [--node ID]"
        click.echo(f"Output: fluksio runs logs {run.id}{node} [--follow]")
    if follow and run.state is not RunState.SUCCEEDED:
        sys.exit(1)


@runs.command()
@click.argument("flow")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A run parameter; VALUE is read as JSON when it is JSON.",
)
@click.option("--follow", is_flag=True, help="Show the run live until it ends.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@click.pass_context
def start(
    ctx: click.Context, flow: str, params: tuple[str, ...], follow: bool, as_json: bool
) -> None:
    """Start a run of FLOW."""
    client = client_of(ctx)
    run = client.start_run(flow, dict(map(_parse_param, params)))
    _finish(run, follow, as_json, client)


@runs.command()
@click.argument("run_id")
@click.option("--follow", is_flag=True, help="Show the run live until it ends.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@click.pass_context
def show(ctx: click.Context, run_id: str, follow: bool, as_json: bool) -> None:
    """Show run RUN_ID (and follow it live)."""
    client = client_of(ctx)
    _finish(client.run(run_id), follow, as_json, client)


def _since(text: str | None) -> datetime | None:
    """``--since``: how long ago (``90s``, ``30m``, ``2h``, ``7d``) or an ISO 8601 time
    (without a zone: this machine's)."""
    if text is None:
        return None
    amount, unit = text[:-1], text[-1:]
    if amount.isdigit() and unit in _UNITS:
        return datetime.now(UTC) - timedelta(seconds=int(amount) * _UNITS[unit])
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"--since takes a time ago like 30m, 2h or 7d, or an ISO 8601 time, not {text!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.astimezone()


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@runs.command(name="list")
@click.option("--flow", help="Only runs of this flow.")
@click.option("--state", type=click.Choice([s.value for s in RunState]), help="Only runs in it.")
@click.option("--since", help="Only runs created since: 30m, 2h, 7d, or an ISO 8601 time.")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print what the engine answered, as JSON.")
@click.pass_context
def list_runs(
    ctx: click.Context,
    *,
    flow: str | None,
    state: str | None,
    since: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """The newest runs, with their flow, state and times."""
    found = client_of(ctx).runs(flow=flow, state=state, since=_since(since), limit=limit)
    if as_json:
        click.echo(json_text(found))
        return
    if not found:
        click.echo("No runs.")
        return
    rows = [
        [run.id, run.flow, run.state, when(run.created_at), _took(run.started_at, run.ended_at)]
        for run in found
    ]
    table(rows, ["RUN", "FLOW", "STATE", "CREATED", "TOOK"])


def _took(started: datetime | None, ended: datetime | None) -> str:
    return "-" if started is None or ended is None else f"{(ended - started).total_seconds():.3f}s"


@runs.command()
@click.argument("run_id")
@click.option("--items", help="Only these items of its array, by position: 3,17,40-49.")
@click.option("--node", "node_id", help="The array node (with --items, when it has more).")
@click.pass_context
def cancel(ctx: click.Context, run_id: str, items: str | None, node_id: str | None) -> None:
    """Cancel run RUN_ID: what it is executing is killed; waits (up to 30 s) until it is.
    With --items, only those items of its array are cancelled; the rest go on."""
    if items is not None:
        chosen = client_of(ctx).cancel_items(run_id, positions(items), node_id)
        for line in [line for node in chosen.nodes if node.array for line in render_array(node)]:
            click.echo(line)
        return
    run = client_of(ctx).cancel_run(run_id, wait=30)
    if run.state in TERMINAL_RUN_STATES:
        click.echo(f"run {run.id}: {run.state}")
    else:
        click.echo(f"run {run.id}: {run.state}, its calls still being stopped")


@runs.command()
@click.argument("run_id")
@click.option("--node", "node_id", help="Only this node's output (default: every node's).")
@click.option("--item", type=click.IntRange(0), help="An array's item, by position.")
@click.option("--follow", is_flag=True, help="Keep printing lines as they come, to the end.")
@click.pass_context
def logs(
    ctx: click.Context, run_id: str, node_id: str | None, item: int | None, follow: bool
) -> None:
    """Print what the nodes of run RUN_ID wrote (stdout and stderr); --follow prints the
    lines of a running node as they come, from its first attempt to its last, and picks
    up where it left off when the connection drops. An array's items each have their
    own: --node NODE --item N."""
    client = client_of(ctx)
    run = client.run(run_id)
    names = [node.id for node in run.nodes]
    if node_id is not None and node_id not in names:
        raise ConfigError(f"run {run_id} has no node {node_id!r} (it has {', '.join(names)})")
    arrays = {node.id for node in run.nodes if node.array is not None}
    if item is not None and node_id not in arrays:
        raise ConfigError("--item names an array's item: give the array with --node")
    chosen = [node_id] if node_id is not None else names
    for name in chosen:
        if name in arrays and item is None:
            said = f"runs logs {run_id} --node {name} --item N"
            click.echo(f"[{name}] an array: each item's output is its own ({said})")
            continue
        print_logs(client, run_id, name, follow=follow, prefix=len(chosen) > 1, item=item)


@runs.command()
@click.argument("run_id")
@click.pass_context
def delete(ctx: click.Context, run_id: str) -> None:
    """Delete ended run RUN_ID (its artifacts go once nothing kept refers to them)."""
    client_of(ctx).delete_run(run_id)
    click.echo(f"run {run_id}: deleted")
