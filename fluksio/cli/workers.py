"""``fluksio workers list|resources|waiting``: what the Workers screen shows, for scripts."""

from __future__ import annotations

import click

from fluksio.cli.context import api_group, client_of
from fluksio.cli.tables import json_text, table, when
from fluksio.wire.answers.workers import AmountsBody, RefusedWorkerBody

__all__ = ["workers"]


@api_group("Attached workers, their resources, and why calls wait (the Workers screen).")
def workers() -> None: ...


def _amount(free: int | None, total: int | None) -> str:
    return "-" if total is None else f"{free if free is not None else '?'}/{total}"


def _of(amounts: AmountsBody | None, resource: str) -> int | None:
    return None if amounts is None else getattr(amounts, resource)


def _calls(in_flight: int, sent_ahead: int, parallel: int) -> str:
    """Running of its slots, then what it holds ahead: ``1/1 +2 ahead``."""
    running = f"{in_flight - sent_ahead}/{parallel}"
    return f"{running} +{sent_ahead} ahead" if sent_ahead else running


@workers.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print what the engine answered, as JSON.")
@click.pass_context
def list_workers(ctx: click.Context, as_json: bool) -> None:
    """Attached workers, and those refused for their protocol."""
    answer = client_of(ctx).workers()
    if as_json:
        return click.echo(json_text(answer))
    if not answer:
        click.echo("No workers attached.")
        return None
    rows = []
    for worker in answer:
        if isinstance(worker, RefusedWorkerBody):
            rows.append([worker.name, "needs upgrade", worker.version or "?", "-", "-", "-"])
            continue
        free, inventory = worker.free, worker.inventory
        cpus = _amount(_of(free, "cpus"), _of(inventory, "cpus"))
        gpus = _amount(_of(free, "gpus"), _of(inventory, "gpus"))
        rows.append(
            [
                worker.name,
                worker.status,
                f"{worker.version} (protocol {worker.protocol})",
                _calls(worker.in_flight, worker.sent_ahead, worker.parallel),
                f"cpus {cpus}, gpus {gpus}",
                ",".join(worker.labels) or "-",
            ]
        )
    table(rows, ["NAME", "STATUS", "VERSION", "CALLS", "FREE", "LABELS"])
    return None


@workers.command()
@click.option("--json", "as_json", is_flag=True, help="Print what the engine answered, as JSON.")
@click.pass_context
def resources(ctx: click.Context, as_json: bool) -> None:
    """Every place's amounts and what is free, by label too."""
    answer = client_of(ctx).resources()
    if as_json:
        return click.echo(json_text(answer))
    rows = []
    for place in answer.places:
        have, free = place.inventory, place.free
        rows.append(
            [
                place.name,
                f"{free.slots}/{have.slots}",
                _amount(free.cpus, have.cpus),
                _amount(free.gpus, have.gpus),
                _amount(free.ram_mb, have.ram_mb),
                ",".join(place.labels) or "-",
            ]
        )
    table(rows, ["PLACE", "SLOTS FREE", "CPUS FREE", "GPUS FREE", "RAM MB FREE", "LABELS"])
    if answer.labels:
        click.echo("")
        by_label = [
            [label, str(entry.workers), ", ".join(f"{k} {v}" for k, v in entry.free.items())]
            for label, entry in sorted(answer.labels.items())
        ]
        table(by_label, ["LABEL", "WORKERS", "FREE"])
    return None


@workers.command()
@click.option("--json", "as_json", is_flag=True, help="Print the waiting calls as JSON.")
@click.pass_context
def waiting(ctx: click.Context, as_json: bool) -> None:
    """Each waiting node call, in the order it will be served, and why it waits."""
    queued = client_of(ctx).resources().queued
    if as_json:
        return click.echo(json_text(queued))
    if not queued:
        click.echo("Nothing is waiting: every node call has a place to run.")
        return None
    rows = [
        [
            f"{call.flow}/{call.node}",
            call.run_id,
            call.worker or "any",
            when(call.queued_at),
            call.reason or "waiting for the next scheduling pass",
        ]
        for call in queued
    ]
    table(rows, ["NODE", "RUN", "WANTS", "QUEUED AT", "WHY IT WAITS"])
    return None
