"""``fluksio runs start FLOW`` and ``fluksio runs show ID [--follow]``: a live view.

Exit codes: 0 when the run succeeded (or, without ``--follow``, was started or shown);
1 when a followed run failed or was cancelled; 2 for a usage error.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from fluksio.api.cli.client import ApiClient
from fluksio.api.cli.context import api_group, client_of
from fluksio.api.runs.provenance import Provenance
from fluksio.errors import ConfigError

__all__ = ["render_run", "runs"]

TERMINAL = {"succeeded", "failed", "cancelled"}
_PREVIEW = 70


@api_group("Runs of flows.")
def runs() -> None: ...


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


def _node_line(node: dict[str, Any]) -> str:
    state = node["state"]
    where = node["ran_on"] or ""
    took = f"{node['duration_s']:.3f}s" if node["duration_s"] is not None else ""
    if state == "succeeded":
        detail = f"-> {_preview(node['result'])}"
    elif state in {"failed", "skipped", "cancelled"} and node["error"]:
        detail = node["error"]["short"]
    elif state == "queued":
        detail = f"waiting: {node['reason']}"
    elif state == "running" and node["events"]:
        last = node["events"][-1]
        detail = f"{last['event']} {_preview(last['outputs'])}"
    else:
        detail = ""
    line = f"  {node['id']:16} {state:10} {where:18} {took:>9}  {detail}"
    provenance = node.get("provenance")
    if not provenance:
        return line
    return f"{line}\n{'':20}on {Provenance.from_json(provenance).describe()}"


def render_run(run: dict[str, Any]) -> list[str]:
    head = f"run {run['id']} of {run['flow']!r}: {run['state']}"
    if run.get("reason"):
        head += f" ({run['reason']})"
    return [head, *(_node_line(node) for node in run["nodes"])]


def _follow(client: ApiClient, run_id: str) -> dict[str, Any]:
    live = sys.stdout.isatty()
    shown: list[str] = []
    while True:
        run: dict[str, Any] = client.get(f"/runs/{run_id}?wait=1")
        lines = render_run(run)
        if live:
            if shown:
                click.echo(f"\x1b[{len(shown)}F\x1b[J", nl=False)
            click.echo("\n".join(lines))
        else:
            for line in lines:
                if line not in shown:
                    click.echo(line)
        shown = lines
        if run["state"] in TERMINAL:
            return run


def _finish(run: dict[str, Any], follow: bool, as_json: bool, client: ApiClient) -> None:
    if follow and as_json:
        while run["state"] not in TERMINAL:
            run = client.get(f"/runs/{run['id']}?wait=30")
    elif follow:
        run = _follow(client, run["id"])
    if as_json:
        click.echo(json.dumps(run, indent=2))
    elif not follow:
        click.echo("\n".join(render_run(run)))
    if follow and run["state"] != "succeeded":
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
    run = client.post(f"/flows/{flow}/runs", {"params": dict(map(_parse_param, params))})
    _finish(run, follow, as_json, client)


@runs.command()
@click.argument("run_id")
@click.option("--follow", is_flag=True, help="Show the run live until it ends.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@click.pass_context
def show(ctx: click.Context, run_id: str, follow: bool, as_json: bool) -> None:
    """Show run RUN_ID (and follow it live)."""
    client = client_of(ctx)
    _finish(client.get(f"/runs/{run_id}"), follow, as_json, client)


@runs.command()
@click.argument("run_id")
@click.pass_context
def cancel(ctx: click.Context, run_id: str) -> None:
    """Cancel run RUN_ID: what it is executing is killed."""
    run = client_of(ctx).post(f"/runs/{run_id}/cancel")
    click.echo(f"run {run['id']}: {run['state']}")
