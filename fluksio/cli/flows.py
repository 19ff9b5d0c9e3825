"""``fluksio flows put FILE.json`` and ``fluksio flows list``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from fluksio.cli.context import api_group, client_of
from fluksio.cli.tables import when
from fluksio.errors import ConfigError
from fluksio.wire.answers.flows import FlowBody

__all__ = ["flows"]


@api_group("Flows on the engine.")
def flows() -> None: ...


def load_flow_file(path: Path) -> tuple[str | None, dict[str, Any]]:
    """The flow in ``path``: ``{"name"?, "nodes": [...]}``; a node's ``code_file`` (relative
    to the file) is read into its ``code``."""
    try:
        document = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("nodes"), list):
        raise ConfigError(f'{path} must hold a JSON object with a "nodes" list')
    for index, node in enumerate(document["nodes"]):
        if isinstance(node, dict) and "code_file" in node:
            source = path.parent / str(node.pop("code_file"))
            try:
                node["code"] = source.read_text()
            except OSError as exc:
                raise ConfigError(f"nodes.{index}.code_file: cannot read {source}") from exc
    name = document.pop("name", None)
    return (str(name) if name is not None else None), document


@flows.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--name", help="The flow's name (default: the file's 'name', else its stem).")
@click.pass_context
def put(ctx: click.Context, file: Path, name: str | None) -> None:
    """Create or replace a flow from FILE (JSON)."""
    named, body = load_flow_file(file)
    flow_name = name or named or file.stem
    answer = client_of(ctx).read(FlowBody, "PUT", f"/flows/{flow_name}", body)
    click.echo(f"Flow {answer.name!r} saved with {len(answer.nodes)} node(s).")
    for warning in answer.warnings:
        click.echo(f"warning: {warning}", err=True)


@flows.command(name="list")
@click.pass_context
def list_flows(ctx: click.Context) -> None:
    """List the flows."""
    for flow in client_of(ctx).flows():
        click.echo(f"{flow.name:30} {flow.nodes:4} node(s)  updated {when(flow.updated_at)}")
