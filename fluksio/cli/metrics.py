"""``fluksio metrics token mint|list|revoke``: the scrape tokens Prometheus reads with."""

from __future__ import annotations

import click

from fluksio.cli.context import api_group, client_of
from fluksio.cli.tables import json_text, table, when

__all__ = ["metrics"]


@api_group("The engine's Prometheus metrics (GET /metrics) and who may scrape them.")
def metrics() -> None: ...


@metrics.group()
def token() -> None:
    """Scrape tokens: each reads /metrics and nothing else."""


@token.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the whole answer as JSON.")
@click.pass_context
def mint(ctx: click.Context, name: str, as_json: bool) -> None:
    """Mint a scrape token for NAME (a Prometheus server); it is printed once."""
    answer = client_of(ctx).mint_scrape_token(name)
    if as_json:
        click.echo(json_text(answer))
        return
    click.echo(answer.token)
    click.echo(f"(scrape token {answer.name!r}, id {answer.id})", err=True)


@token.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_tokens(ctx: click.Context, as_json: bool) -> None:
    """List scrape tokens (never their text)."""
    answer = client_of(ctx).scrape_tokens()
    if as_json:
        click.echo(json_text(answer))
        return
    rows = [[t.id, t.name, t.status, when(t.created_at), t.created_by] for t in answer]
    table(rows, ["ID", "NAME", "STATUS", "CREATED", "BY"])


@token.command()
@click.argument("token_id")
@click.pass_context
def revoke(ctx: click.Context, token_id: str) -> None:
    """Revoke scrape token TOKEN_ID: refused from the next scrape on."""
    answer = client_of(ctx).revoke_scrape_token(token_id)
    click.echo(f"Revoked scrape token {answer.name!r} ({answer.id}).")
