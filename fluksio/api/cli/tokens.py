"""``fluksio tokens mint|list|revoke``: worker tokens, through a running engine's API."""

from __future__ import annotations

import json
from pathlib import Path

import click

from fluksio.api.cli.client import ApiClient, resolve_api_url
from fluksio.api.cli.options import data_dir_option

__all__ = ["tokens"]


@click.group()
@click.option("--url", envvar="FLUKSIO_URL", help="The engine's API base, ending in /api/v1.")
@data_dir_option
@click.pass_context
def tokens(ctx: click.Context, url: str | None, data_dir: Path) -> None:
    """Worker tokens (credentials from $FLUKSIO_TOKEN or $FLUKSIO_USERNAME/$FLUKSIO_PASSWORD)."""
    client = ApiClient(resolve_api_url(url, data_dir))
    ctx.obj = client


def _client(ctx: click.Context) -> ApiClient:
    client: ApiClient = ctx.obj
    client.login_from_environment()
    return client


@tokens.command()
@click.argument("name")
@click.option("--labels", default="", help="Comma-separated labels to sign into the token.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole answer as JSON.")
@click.pass_context
def mint(ctx: click.Context, name: str, labels: str, as_json: bool) -> None:
    """Mint a token for worker NAME; the token is printed once and never stored."""
    label_list = [label.strip() for label in labels.split(",") if label.strip()]
    answer = _client(ctx).post("/workers/tokens", {"name": name, "labels": label_list})
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    click.echo(answer["token"])
    click.echo(
        f"(worker {answer['name']!r}, labels {','.join(answer['labels']) or '-'},"
        f" jti {answer['jti']}, expires {answer['expires_at']})",
        err=True,
    )


@tokens.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def list_tokens(ctx: click.Context, as_json: bool) -> None:
    """List worker tokens (never their text)."""
    answer = _client(ctx).get("/workers/tokens")
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    click.echo(f"{'JTI':32}  {'NAME':20}  {'STATUS':8}  {'EXPIRES':20}  LABELS")
    for row in answer:
        click.echo(
            f"{row['jti']:32}  {row['name']:20}  {row['status']:8}  {row['expires_at']:20}"
            f"  {','.join(row['labels'])}"
        )


@tokens.command()
@click.argument("jti")
@click.pass_context
def revoke(ctx: click.Context, jti: str) -> None:
    """Revoke the token JTI: attached workers using it are refused from now on."""
    answer = _client(ctx).post(f"/workers/tokens/{jti}/revoke")
    click.echo(f"Revoked {answer['name']!r} ({answer['jti']}): {answer['revoked_reason']}.")
