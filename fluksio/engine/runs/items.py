"""An array's items on disk: read in order from their source, and their rows once started.

The source is the node's inline ``items`` or its ``items_from`` artifacts, JSON lines read
in order: an item's position is its line's, counted across the artifacts. Nothing of an
item is stored until it starts; from then on it has a row in ``array_items``, with the same
columns as a node's. An item with no row, or whose row says it is to run again
(``queued`` or ``pending``), is still to run.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fluksio.engine.database import Database
from fluksio.engine.runs.machine.rows import ArraySummary, Earlier, NodeRow
from fluksio.engine.runs.store import node_row, stored_ref
from fluksio.errors import InvalidInput
from fluksio.wire.flows import ITEMS_MAX, NodeSpec
from fluksio.wire.states import NodeState

__all__ = ["LINE_BYTES", "ArrayItems", "ItemSource", "ItemStore", "unstarted"]

_TO_RUN = (None, NodeState.QUEUED.value, NodeState.PENDING.value)
FAILURES_READ = 5
LINE_BYTES = 16 << 20
"""An array's items in line together hold at most this many bytes of parameters (and
1,024 items): a thousand items of 256 KiB held 226 MiB per run before."""
COUNTS_KEPT = 4096
"""Artifacts of items whose count is remembered."""


_NEVER_RAN = Earlier(None, 1, 0, (), None)
_CANCELLED_AHEAD = Earlier(NodeState.CANCELLED.value, 1, 0, (), None)


def unstarted(array: NodeRow, position: int) -> NodeRow:
    """An item with no row (it has not started), as it stands: in line while its array
    is live; as its array ended when that was a cancel or a skip."""
    ended = array.state in (NodeState.CANCELLED, NodeState.SKIPPED)
    return NodeRow(array.node_id, array.state if ended else NodeState.QUEUED, item=position)


def _counted_lines(path: Path, field: str, most: int) -> tuple[int, int]:
    """The items in one artifact of JSON lines, and the largest's bytes;
    :class:`InvalidInput` naming the line that is no JSON object, or over ``most`` bytes.
    Reads every line, each at most once past ``most``: off the event loop."""
    count = largest = 0
    with path.open("rb") as lines:
        for number, line in enumerate(iter(lambda: lines.readline(most + 2), b""), 1):
            if len(line.rstrip(b"\r\n")) > most:
                raise InvalidInput(field, _too_large(f"line {number}", most))
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except ValueError as exc:
                raise InvalidInput(field, f"line {number} is not JSON ({exc})") from None
            if not isinstance(item, dict):
                raise InvalidInput(field, f"line {number} is not a JSON object")
            count += 1
            largest = max(largest, len(line))
    return count, largest


def _too_large(what: str, most: int) -> str:
    return (
        f"{what} is over the {most:,} bytes an item may be (the engine's --max-item-bytes):"
        " an item holds parameters; save large data as an artifact (PUT /artifacts,"
        " client.put_artifact) and name it in the item"
    )


@dataclass
class _Reading:
    """Where the next item of one array is in its source."""

    position: int
    artifact: int
    offset: int


class ItemSource:
    """Reads an array's items in order, resuming where the last read ended."""

    def __init__(self, path_of: Any, max_item_bytes: int = 1 << 20) -> None:
        self._path_of = path_of
        self.max_item_bytes = max_item_bytes
        self._readings: dict[tuple[str, str], _Reading] = {}
        self._counts: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()
        """Each artifact's items and its largest item's bytes, once checked: an artifact
        never changes (its digest names its bytes), so a flow put and each run of it read
        its lines once."""
        self._largest: collections.OrderedDict[tuple[str, ...], int] = collections.OrderedDict()
        """Each source's largest item (its artifacts' digests), asked at every refill."""
        self._lock = threading.Lock()
        """Runs are counted on threads: two may start at once."""

    def count(self, spec: NodeSpec, index: int) -> int:
        """How many items an array node (``nodes.{index}``) has; :class:`InvalidInput`
        naming the artifact and the line when one is missing or a line is no JSON object,
        or when they are too many. Reads an artifact's lines the first time only: run it
        off the event loop."""
        if spec.items is not None:
            for position, item in enumerate(spec.items):
                if len(json.dumps(item)) > self.max_item_bytes:
                    item_field = f"nodes.{index}.items.{position}"
                    raise InvalidInput(item_field, _too_large("the item", self.max_item_bytes))
            return len(spec.items)
        total = 0
        for position, digest in enumerate(spec.items_from or []):
            field = f"nodes.{index}.items_from.{position}"
            total += self._counted(digest, field)[0]
        if total > ITEMS_MAX:
            raise InvalidInput(
                f"nodes.{index}.items_from",
                f"{total:,} items, over the {ITEMS_MAX:,} one array may have: split them"
                " over several array nodes or runs",
            )
        if not total:
            raise InvalidInput(f"nodes.{index}.items_from", "the artifacts hold no item")
        return total

    def _counted(self, digest: str, field: str) -> tuple[int, int]:
        """One artifact's items and its largest item's bytes (see :meth:`count`)."""
        path = Path(self._path_of(digest))
        if not path.exists():  # looked at each time: the sweep may have removed it
            raise InvalidInput(field, f"no artifact {digest}: upload it (PUT /artifacts)")
        with self._lock:
            counted = self._counts.get(digest)
        if counted is None:
            counted = _counted_lines(path, field, self.max_item_bytes)
            with self._lock:
                self._counts[digest] = counted
                while len(self._counts) > COUNTS_KEPT:
                    self._counts.popitem(last=False)
        return counted

    def largest(self, spec: NodeSpec) -> int:
        """The bytes of an array's largest item, as its source holds it (its inline items
        are held with its flow already: none counted)."""
        digests = tuple(spec.items_from or ())
        found = self._largest.get(digests)
        if found is None:
            with contextlib.suppress(InvalidInput):  # gone since: its read says so
                found = max((self._counted(d, "items_from")[1] for d in digests), default=0)
                self._largest[digests] = found
                while len(self._largest) > COUNTS_KEPT:
                    self._largest.popitem(last=False)
        return found or 0

    def read(
        self, run_id: str, spec: NodeSpec, start: int, count: int
    ) -> list[tuple[int, dict[str, Any]]]:
        """Up to ``count`` items from position ``start`` on, with their positions."""
        if spec.items is not None:
            return list(enumerate(spec.items[start : start + count], start))
        key = (run_id, spec.id)
        reading = self._readings.get(key)
        if reading is None or reading.position != start:
            reading = _Reading(0, 0, 0)  # from the top: a restart, or a retry
        found: list[tuple[int, dict[str, Any]]] = []
        for item in self._lines(spec.items_from or [], reading):
            if reading.position - 1 >= start:
                found.append((reading.position - 1, item))
            if len(found) == count:
                break
        self._readings[key] = reading
        return found

    def pick(self, spec: NodeSpec, positions: set[int]) -> dict[int, dict[str, Any]]:
        """The parameters of the items at ``positions`` (a restart's items on workers,
        a few): read from the top of the source until each is found."""
        if spec.items is not None:
            return {p: spec.items[p] for p in positions if 0 <= p < len(spec.items)}
        found: dict[int, dict[str, Any]] = {}
        reading = _Reading(0, 0, 0)
        for item in self._lines(spec.items_from or [], reading):
            if reading.position - 1 in positions:
                found[reading.position - 1] = item
                if len(found) == len(positions):
                    break
        return found

    def forget(self, run_id: str) -> None:
        for key in [key for key in self._readings if key[0] == run_id]:
            del self._readings[key]

    def _lines(self, digests: list[str], reading: _Reading) -> Iterator[dict[str, Any]]:
        """The items from ``reading`` on, moving it past each as it is yielded."""
        while reading.artifact < len(digests):
            with Path(self._path_of(digests[reading.artifact])).open("rb") as lines:
                lines.seek(reading.offset)
                for line in lines:
                    reading.offset += len(line)
                    if line.strip():
                        reading.position += 1
                        yield json.loads(line)
            reading.artifact += 1
            reading.offset = 0


class ItemStore:
    """The rows of the items that have started."""

    def __init__(self, database: Database) -> None:
        self._db = database

    def cancel_ahead(self, run_id: str, node_id: str, ranges: Sequence[tuple[int, int]]) -> None:
        """Items cancelled before they were read: ``(low, high)`` ranges of positions."""
        with self._db.transaction() as connection:
            connection.executemany(
                "INSERT INTO item_cancels (run_id, node_id, low, high) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (run_id, node_id, low) DO UPDATE SET high = excluded.high",
                [(run_id, node_id, low, high) for low, high in ranges],
            )

    def cancelled_ahead(
        self, run_id: str, node_id: str, low: int = 0, high: int = 1 << 62
    ) -> list[tuple[int, int]]:
        """The ranges of items cancelled before they were read that meet ``low..high``."""
        rows = self._db.execute(
            "SELECT low, high FROM item_cancels WHERE run_id = ? AND node_id = ?"
            " AND high >= ? AND low <= ? ORDER BY low",
            (run_id, node_id, low, high),
        )
        return [(row["low"], row["high"]) for row in rows]

    def page(
        self, run_id: str, node_id: str, *, after: int, limit: int, state: str | None = None
    ) -> list[NodeRow]:
        """The rows after position ``after``, in order, ``limit`` at most; with the items
        cancelled before they were read (rows of their own only here) unless ``state``
        names another."""
        rows = self._stored_page(run_id, node_id, after=after, limit=limit, state=state)
        if state not in (None, NodeState.CANCELLED.value):
            return rows
        positions = (
            position
            for low, high in self.cancelled_ahead(run_id, node_id, after + 1)
            for position in range(max(low, after + 1), high + 1)
        )
        ahead = [
            NodeRow(node_id, NodeState.CANCELLED, item=position)
            for position in itertools.islice(positions, limit)
        ]
        merged = sorted([*rows, *ahead], key=lambda row: row.item or 0)
        return merged[:limit]

    def _stored_page(
        self, run_id: str, node_id: str, *, after: int, limit: int, state: str | None
    ) -> list[NodeRow]:
        where = "run_id = ? AND node_id = ? AND idx > ?"
        values: list[object] = [run_id, node_id, after]
        if state is not None:
            where += " AND state = ?"
            values.append(state)
        rows = self._db.execute(
            f"SELECT * FROM array_items WHERE {where} ORDER BY idx LIMIT ?",  # noqa: S608
            (*values, limit),
        )
        return [node_row(row) for row in rows]

    def states(self, run_id: str, node_id: str, low: int, high: int) -> dict[int, Earlier]:
        """How each item with a row from ``low`` to ``high`` stands: its state and how its
        attempts were spent."""
        rows = self._db.execute(
            "SELECT idx, state, attempt, interruptions, crashes, checkpoint FROM array_items"
            " WHERE run_id = ? AND node_id = ? AND idx BETWEEN ? AND ?",
            (run_id, node_id, low, high),
        )
        found = {
            row["idx"]: Earlier(
                row["state"],
                row["attempt"],
                row["interruptions"],
                tuple(json.loads(row["crashes"])) if row["crashes"] else (),
                stored_ref(row["checkpoint"]),
            )
            for row in rows
        }
        for first, last in self.cancelled_ahead(run_id, node_id, low, high):
            for position in range(max(first, low), min(last, high) + 1):
                found[position] = _CANCELLED_AHEAD
        return found

    def summary(self, run_id: str, node_id: str, total: int) -> ArraySummary:
        """The array's counts as its rows say (an item with none is queued)."""
        counts: collections.Counter[str] = collections.Counter()
        for row in self._db.execute(
            "SELECT state, count(*) AS n FROM array_items WHERE run_id = ? AND node_id = ?"
            " GROUP BY state",
            (run_id, node_id),
        ):
            state = row["state"]
            counts[NodeState.QUEUED.value if state == NodeState.PENDING else state] += row["n"]
        ahead = sum(high - low + 1 for low, high in self.cancelled_ahead(run_id, node_id))
        if ahead:
            counts[NodeState.CANCELLED.value] += ahead
        counts[NodeState.QUEUED.value] += total - sum(counts.values())
        failures = [
            {"item": row.item, "error": row.error or {}}
            for row in self._stored_page(
                run_id, node_id, after=-1, limit=FAILURES_READ, state=NodeState.FAILED
            )
        ]
        return ArraySummary(total, {k: n for k, n in counts.items() if n > 0}, failures)

    def held(self, run_id: str, node_id: str) -> list[NodeRow]:
        """The rows of the items stored as running on a worker (with a holder)."""
        rows = self._db.execute(
            "SELECT * FROM array_items WHERE run_id = ? AND node_id = ? AND state = 'running'"
            " AND holder IS NOT NULL ORDER BY idx",
            (run_id, node_id),
        )
        return [node_row(row) for row in rows]

    def interrupted(
        self,
        run_id: str,
        node_id: str,
        error: dict[str, Any] | None,
        now: float,
        *,
        spare_held: bool = False,
    ) -> None:
        """The items stored as running were lost: to run again as a new attempt, or
        failed with ``error``; with ``spare_held``, those on a worker are left running."""
        if error is None:
            sql = "UPDATE array_items SET state = 'queued', attempt = attempt + 1, ended_at = ?"
            values: tuple[object, ...] = (now,)
        else:
            sql = "UPDATE array_items SET state = 'failed', error = ?, ended_at = ?"
            values = (json.dumps(error), now)
        with self._db.transaction() as connection:
            spared = " AND holder IS NULL" if spare_held else ""
            connection.execute(
                f"{sql} WHERE run_id = ? AND node_id = ? AND state = 'running'{spared}",
                (*values, run_id, node_id),
            )

    def run_again(self, run_id: str, node_id: str) -> int:
        """The failed items run again, each as a new attempt; how many."""
        with self._db.transaction() as connection:
            return connection.execute(
                "UPDATE array_items SET state = 'queued', attempt = attempt + 1, error = NULL"
                " WHERE run_id = ? AND node_id = ? AND state = 'failed'",
                (run_id, node_id),
            ).rowcount


class ArrayItems:
    """The items still to run of an array, read from its source past those over."""

    def __init__(self, source: ItemSource, store: ItemStore) -> None:
        self.source = source
        self.store = store

    def room(self, spec: NodeSpec, count: int, in_line: int) -> int:
        """Of ``count`` items asked for, how many to read with ``in_line`` in line already:
        the line's items together are at most :data:`LINE_BYTES` (by its largest item),
        one at least. Whatever the items, an array's line holds that much of them."""
        largest = self.source.largest(spec)
        if not largest:
            return count
        return max(0, min(count, max(1, LINE_BYTES // largest) - in_line))

    def next(
        self, run_id: str, spec: NodeSpec, cursor: int, count: int, total: int
    ) -> tuple[list[tuple[int, dict[str, Any], Earlier]], int]:
        """Up to ``count`` items still to run from ``cursor`` on, ``(position,
        parameters, how it stands)`` each, and where the next look starts."""
        found: list[tuple[int, dict[str, Any], Earlier]] = []
        while len(found) < count and cursor < total:
            read = self.source.read(run_id, spec, cursor, count - len(found))
            if not read:
                return found, total  # the source ended before its count: nothing more
            stored = self.store.states(run_id, spec.id, read[0][0], read[-1][0])
            for position, params in read:
                earlier = stored.get(position, _NEVER_RAN)
                if earlier.state in _TO_RUN:
                    found.append((position, params, earlier))
            cursor = read[-1][0] + 1
        return found, cursor
