"""``fluksio personal-tokens mint|list|revoke``: your own API tokens, for your scripts."""

from __future__ import annotations

import click

from fluksio.cli.context import api_group, client_of
from fluksio.cli.tables import json_text, table, when

__all__ = ["personal_tokens"]


@api_group("Your personal API tokens: what your scripts present as $FLUKSIO_TOKEN.")
def personal_tokens() -> None: ...


@personal_tokens.command()
@click.argument("name")
@click.option("--days", type=click.IntRange(1, 365), default=90, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the whole answer as JSON.")
@click.pass_context
def mint(ctx: click.Context, name: str, days: int, as_json: bool) -> None:
    """Mint a token named NAME for yourself, valid DAYS; it is printed once."""
    answer = client_of(ctx).mint_personal_token(name, days=days)
    if as_json:
        click.echo(json_text(answer))
        return
    click.echo(answer.token)
    click.echo(
        f"(personal token {answer.name!r}, id {answer.id}, until {when(answer.expires_at)})",
        err=True,
    )


@personal_tokens.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_tokens(ctx: click.Context, as_json: bool) -> None:
    """List your personal tokens (never their text)."""
    answer = client_of(ctx).personal_tokens()
    if as_json:
        click.echo(json_text(answer))
        return
    rows = [[t.id, t.name, t.status, when(t.created_at), when(t.expires_at)] for t in answer]
    table(rows, ["ID", "NAME", "STATUS", "CREATED", "EXPIRES"])


@personal_tokens.command()
@click.argument("token_id")
@click.pass_context
def revoke(ctx: click.Context, token_id: str) -> None:
    """Revoke your token TOKEN_ID: refused from its next request on."""
    answer = client_of(ctx).revoke_personal_token(token_id)
    click.echo(f"Revoked personal token {answer.name!r} ({answer.id}).")
