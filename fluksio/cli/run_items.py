"""``fluksio runs items RUN`` (an array's items, a page at a time) and ``fluksio runs
retry RUN --failed`` (what failed runs again, in the run); and the lines ``runs show``
prints of an array."""

from __future__ import annotations

import json

import click

from fluksio.cli.context import client_of
from fluksio.cli.tables import json_text, table
from fluksio.errors import ConfigError
from fluksio.wire.answers.runs import ArrayBody, NodeBody
from fluksio.wire.states import NodeState

__all__ = ["array_lines", "items", "positions", "render_array", "retry"]

_FAILURES_SHOWN = 3
_MOST_AT_ONCE = 10_000
_PREVIEW = 60


def array_lines(array: ArrayBody, indent: str) -> list[str]:
    """``10,000 items: 9,812 queued, 120 running, 66 succeeded, 2 failed``, then the
    first failures."""
    counts = ", ".join(f"{count:,} {state}" for state, count in array.counts.items())
    lines = [f"{indent}{array.total:,} items: {counts}"]
    for failure in array.failures[:_FAILURES_SHOWN]:
        error = failure.get("error") or {}
        said = error.get("short") or error.get("message") or error.get("type", "failed")
        lines.append(f"{indent}item {failure.get('item')}: {said}")
    return lines


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", help="The array node (when the run has more than one).")
@click.option(
    "--state", type=click.Choice([s.value for s in NodeState]), help="Only items in this state."
)
@click.option("--after", type=click.IntRange(-1), default=-1, help="Items after this position.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print what the engine answered, as JSON.")
@click.pass_context
def items(
    ctx: click.Context,
    run_id: str,
    *,
    node_id: str | None,
    state: str | None,
    after: int,
    limit: int,
    as_json: bool,
) -> None:
    """Print a page of the items of an array node of run RUN_ID: each item's state,
    where it ran, and its result or error."""
    page = client_of(ctx).items(run_id, node_id, after=after, limit=limit, state=state)
    if as_json:
        click.echo(json_text(page))
        return
    rows = []
    for item in page.items:
        if item.state == NodeState.SUCCEEDED:
            detail = json.dumps(item.result)
        else:
            detail = (item.error or {}).get("short", "")
        if len(detail) > _PREVIEW:
            detail = detail[: _PREVIEW - 1] + "…"
        rows.append([str(item.item), item.state, item.ran_on or "", str(item.attempt), detail])
    table(rows, ["ITEM", "STATE", "RAN ON", "ATTEMPT", "RESULT / ERROR"])
    if page.next is not None:
        click.echo(f"(more: --after {page.next})")


def positions(text: str) -> list[int]:
    """``3,17,40-49`` as positions; :class:`ConfigError` for anything else."""
    found: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ConfigError(f"--items takes positions like 3,17,40-49, not {text!r}")
        found += range(int(first), int(last if dash else first) + 1)
    if not 1 <= len(found) <= _MOST_AT_ONCE:
        raise ConfigError(f"--items names {len(found):,} items; 1 to {_MOST_AT_ONCE:,} at once")
    return found


def render_array(node: NodeBody) -> list[str]:
    """A node's id and state, then its array's counts."""
    assert node.array is not None
    return [f"{node.id}: {node.state}", *array_lines(node.array, "  ")]


@click.command()
@click.argument("run_id")
@click.option("--failed", is_flag=True, help="Run the failed nodes and items again (required).")
@click.pass_context
def retry(ctx: click.Context, run_id: str, failed: bool) -> None:
    """Run what failed in ended run RUN_ID again, in the same run: its failed nodes and
    array items, each as a new attempt, and the nodes they had skipped."""
    if not failed:
        raise ConfigError("say what to run again: --failed (the failed nodes and items)")
    run = client_of(ctx).retry_run(run_id)
    again = sum((node.array.counts.get("queued", 0) if node.array else 0) for node in run.nodes)
    click.echo(f"run {run.id}: {run.state}, {again:,} items to run again")
