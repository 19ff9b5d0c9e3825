"""``fluksio tokens mint|list|revoke``: worker tokens, through a running engine's API."""

from __future__ import annotations

import click

from fluksio.cli.context import api_group, client_of
from fluksio.cli.tables import json_text, when

__all__ = ["tokens"]


@api_group("Worker tokens (credentials from $FLUKSIO_TOKEN or $FLUKSIO_USERNAME/PASSWORD).")
def tokens() -> None: ...


@tokens.command()
@click.argument("name")
@click.option("--labels", default="", help="Comma-separated labels to sign into the token.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole answer as JSON.")
@click.pass_context
def mint(ctx: click.Context, name: str, labels: str, as_json: bool) -> None:
    """Mint a token for worker NAME; the token is printed once and never stored."""
    label_list = [label.strip() for label in labels.split(",") if label.strip()]
    answer = client_of(ctx).mint_worker_token(name, label_list)
    if as_json:
        click.echo(json_text(answer))
        return
    click.echo(answer.token)
    click.echo(
        f"(worker {answer.name!r}, labels {','.join(answer.labels) or '-'},"
        f" jti {answer.jti}, expires {when(answer.expires_at)})",
        err=True,
    )


@tokens.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_tokens(ctx: click.Context, as_json: bool) -> None:
    """List worker tokens (never their text)."""
    answer = client_of(ctx).worker_tokens()
    if as_json:
        click.echo(json_text(answer))
        return
    click.echo(f"{'JTI':32}  {'NAME':20}  {'STATUS':8}  {'EXPIRES':20}  LABELS")
    for row in answer:
        click.echo(
            f"{row.jti:32}  {row.name:20}  {row.status:8}  {when(row.expires_at):20}"
            f"  {','.join(row.labels)}"
        )


@tokens.command()
@click.argument("jti")
@click.pass_context
def revoke(ctx: click.Context, jti: str) -> None:
    """Revoke the token JTI: attached workers using it are refused from now on."""
    answer = client_of(ctx).revoke_worker_token(jti)
    click.echo(f"Revoked {answer.name!r} ({answer.jti}): {answer.revoked_reason}.")
