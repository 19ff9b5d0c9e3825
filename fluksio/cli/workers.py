"""``fluksio workers list|resources|waiting``: what the Workers screen shows, for scripts."""

from __future__ import annotations

import json
from typing import Any

import click

from fluksio.cli.context import api_group, client_of
from fluksio.cli.tables import table

__all__ = ["workers"]


@api_group("Attached workers, their resources, and why calls wait (the Workers screen).")
def workers() -> None: ...


def _json(answer: Any) -> None:
    click.echo(json.dumps(answer, indent=2))


def _amount(free: int | None, total: int | None) -> str:
    return "-" if total is None else f"{free if free is not None else '?'}/{total}"


@workers.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print what the engine answered, as JSON.")
@click.pass_context
def list_workers(ctx: click.Context, as_json: bool) -> None:
    """Attached workers, and those refused for their protocol."""
    answer = client_of(ctx).get("/workers")
    if as_json:
        return _json(answer)
    if not answer:
        click.echo("No workers attached.")
        return None
    rows = []
    for worker in answer:
        if worker["status"] == "needs upgrade":
            rows.append([worker["name"], "needs upgrade", worker["version"] or "?", "-", "-", "-"])
            continue
        free, inventory = worker["free"] or {}, worker["inventory"] or {}
        cpus = _amount(free.get("cpus"), inventory.get("cpus"))
        gpus = _amount(free.get("gpus"), inventory.get("gpus"))
        rows.append(
            [
                worker["name"],
                worker["status"],
                f"{worker['version']} (protocol {worker['protocol']})",
                f"{worker['in_flight']}/{worker['parallel']}",
                f"cpus {cpus}, gpus {gpus}",
                ",".join(worker["labels"]) or "-",
            ]
        )
    table(rows, ["NAME", "STATUS", "VERSION", "CALLS", "FREE", "LABELS"])
    return None


@workers.command()
@click.option("--json", "as_json", is_flag=True, help="Print what the engine answered, as JSON.")
@click.pass_context
def resources(ctx: click.Context, as_json: bool) -> None:
    """Every place's amounts and what is free, by label too."""
    answer = client_of(ctx).get("/workers/resources")
    if as_json:
        return _json(answer)
    rows = []
    for place in answer["places"]:
        have, free = place["inventory"], place["free"]
        rows.append(
            [
                place["name"],
                f"{free['slots']}/{have['slots']}",
                _amount(free["cpus"], have["cpus"]),
                _amount(free["gpus"], have["gpus"]),
                _amount(free["ram_mb"], have["ram_mb"]),
                ",".join(place["labels"]) or "-",
            ]
        )
    table(rows, ["PLACE", "SLOTS FREE", "CPUS FREE", "GPUS FREE", "RAM MB FREE", "LABELS"])
    if answer["labels"]:
        click.echo("")
        by_label = [
            [label, str(entry["workers"]), ", ".join(f"{k} {v}" for k, v in entry["free"].items())]
            for label, entry in sorted(answer["labels"].items())
        ]
        table(by_label, ["LABEL", "WORKERS", "FREE"])
    return None


@workers.command()
@click.option("--json", "as_json", is_flag=True, help="Print the waiting calls as JSON.")
@click.pass_context
def waiting(ctx: click.Context, as_json: bool) -> None:
    """Each waiting node call, in the order it will be served, and why it waits."""
    queued = client_of(ctx).get("/workers/resources")["queued"]
    if as_json:
        return _json(queued)
    if not queued:
        click.echo("Nothing is waiting: every node call has a place to run.")
        return None
    rows = [
        [
            f"{call['flow']}/{call['node']}",
            call["run_id"],
            call["worker"] or "any",
            call["queued_at"] or "-",
            call["reason"] or "waiting for the next scheduling pass",
        ]
        for call in queued
    ]
    table(rows, ["NODE", "RUN", "WANTS", "QUEUED AT", "WHY IT WAITS"])
    return None
