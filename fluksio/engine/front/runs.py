"""What a client asks the engine of flows, runs and an array's items, answered with the
wire's models.

A part of :class:`~fluksio.engine.front.engine.Engine`: each method is a route's whole business
with the engine (``PUT /flows/{name}`` is :meth:`RunsAsked.put_flow`), so a route reads
its request, asks one question and hands the answer out; what it takes to answer (the
stores, the dispatcher, checking a flow off the event loop, counting an array's items,
the provisioners' profiles a flow is warned against) stays in the engine.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from fluksio.engine.answers import flow_body
from fluksio.engine.runs.answers import item_body, run_body
from fluksio.engine.runs.items import unstarted
from fluksio.engine.runs.validation import check_flow, flow_warnings
from fluksio.errors import InvalidInput, NotFound
from fluksio.wire.answers.flows import FlowBody, FlowSummary
from fluksio.wire.answers.resources import Deleted
from fluksio.wire.answers.runs import ItemsPage, RunBody, RunSummary
from fluksio.wire.flows import FlowSpec
from fluksio.wire.states import NodeState, RunState
from fluksio.wire.times import utc

if TYPE_CHECKING:
    from fluksio.engine.dispatch.dispatcher import Dispatcher
    from fluksio.engine.runs.store import FlowStore, RunStore
    from fluksio.engine.settings import EngineSettings

__all__ = ["RunsAsked"]


class RunsAsked:
    def __init__(
        self,
        *,
        dispatcher: Dispatcher,
        flows: FlowStore,
        runs: RunStore,
        settings: EngineSettings,
    ) -> None:
        self._dispatcher = dispatcher
        self._flows = flows
        self._runs = runs
        self.settings = settings

    # -- flows ---------------------------------------------------------------------------

    def flow_list(self) -> list[FlowSummary]:
        return [
            FlowSummary(name=r.name, nodes=len(r.spec["nodes"]), updated_at=utc(r.updated_at))
            for r in self._flows.all()
        ]

    def flow(self, name: str) -> FlowBody:
        record = self._flows.get(name)
        if record is None:
            raise NotFound(f"no flow named {name!r}")
        return flow_body(record)

    async def put_flow(
        self, name: str, spec: FlowSpec, *, transient: bool
    ) -> tuple[FlowBody, bool]:
        """Create or replace flow ``name``, checked first (off the event loop: a flow of
        10,000 nodes is compiled), its arrays' items counted; the flow as stored, with
        what the provisioners' profiles warn of, and whether it is new."""
        await asyncio.get_running_loop().run_in_executor(None, check_flow, spec)
        await self._count_items(spec)
        created = self._flows.put(name, spec.model_dump(mode="json"), transient=transient)
        provisioning = self._dispatcher.provisioning
        profiles = provisioning.scheduler_profiles() if provisioning is not None else []
        warnings = flow_warnings(spec, profiles, self.settings.walltime_margin_s)
        return self.flow(name).model_copy(update={"warnings": warnings}), created

    def delete_flow(self, name: str) -> Deleted:
        if not self._flows.delete(name):
            raise NotFound(f"no flow named {name!r}")
        return Deleted(deleted=name)

    # -- runs ----------------------------------------------------------------------------

    async def start_run(self, flow: str, params: dict[str, Any]) -> RunBody:
        record = self._flows.get(flow)
        if record is None:
            raise NotFound(f"no flow named {flow!r}")
        items = await self._count_items(FlowSpec.model_validate(record.spec))
        return run_body(self._dispatcher.start_run(flow, params, items))

    def run_list(
        self, *, flow: str | None, state: RunState | None, limit: int, since: float | None
    ) -> list[RunSummary]:
        """The newest runs first, every outcome already received written first."""
        self._dispatcher.write_marked()
        rows = self._runs.find(flow=flow, state=state, limit=limit, since=since)
        return [
            RunSummary(
                id=r.id,
                flow=r.flow,
                state=r.state,
                created_at=utc(r.created_at),
                started_at=utc(r.started_at),
                ended_at=utc(r.ended_at),
            )
            for r in rows
        ]

    async def run(self, run_id: str, wait_s: float = 0.0) -> RunBody:
        """The run, once it has ended or ``wait_s`` has passed."""
        view = await self._dispatcher.wait_run(run_id, wait_s)
        if view is None:
            raise NotFound(f"no run with id {run_id!r}")
        return run_body(view)

    async def cancel_run(self, run_id: str, wait_s: float = 0.0) -> RunBody:
        """Cancel it; the run as it stands, or once it has ended within ``wait_s``."""
        view = self._dispatcher.cancel_run(run_id)
        if wait_s > 0:
            view = await self._dispatcher.wait_run(run_id, wait_s) or view
        return run_body(view)

    def retry_run(self, run_id: str) -> RunBody:
        return run_body(self._dispatcher.retry_failed(run_id))

    def delete_run(self, run_id: str) -> Deleted:
        self._dispatcher.delete_run(run_id)
        return Deleted(deleted=run_id)

    def cancel_items(self, run_id: str, node: str | None, positions: list[int]) -> RunBody:
        return run_body(self._dispatcher.cancel_items(run_id, node, positions))

    def items_page(
        self,
        run_id: str,
        node: str | None,
        *,
        after: int,
        limit: int,
        state: NodeState | None,
    ) -> ItemsPage:
        """A page of an array's items after position ``after``: every position in the
        range, started or not (or, with ``state``, the stored items in it)."""
        view = self._dispatcher.view_run(run_id)
        if view is None:
            raise NotFound(f"no run with id {run_id!r}")
        arrays = {n.row.node_id: n.row for n in view.nodes if n.row.array is not None}
        if not arrays:
            raise NotFound(f"run {run_id} has no array node: its nodes' results are in the run")
        if node is None:
            if len(arrays) != 1:
                raise InvalidInput("node", f"name one of the run's arrays: {', '.join(arrays)}")
            node = next(iter(arrays))
        array = arrays.get(node)
        if array is None or array.array is None:
            raise NotFound(f"run {run_id} has no array node {node!r}")
        total = array.array.total
        rows = self._dispatcher.items.store.page(
            run_id, node, after=after, limit=limit, state=state
        )
        if state is None:
            stored = {row.item: row for row in rows}
            last = min(total - 1, after + limit)
            rows = [
                stored.get(position) or unstarted(array, position)
                for position in range(after + 1, last + 1)
            ]
        last_item = int(rows[-1].item or 0) if rows else total
        more = bool(rows) and (len(rows) == limit if state is not None else last_item < total - 1)
        return ItemsPage(
            run_id=run_id,
            node=node,
            total=total,
            items=[item_body(row) for row in rows],
            next=last_item if more else None,
        )

    async def _count_items(self, flow: FlowSpec) -> dict[str, int]:
        """How many items each array node has, every line of its artifacts checked (off
        the event loop: a million lines take a second)."""
        arrays = [(index, node) for index, node in enumerate(flow.nodes) if node.is_array]
        if not arrays:
            return {}
        source = self._dispatcher.items.source

        def count() -> dict[str, int]:
            return {node.id: source.count(node, index) for index, node in arrays}

        return await asyncio.get_running_loop().run_in_executor(None, count)
