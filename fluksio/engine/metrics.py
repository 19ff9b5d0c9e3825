"""The engine's Prometheus metrics, through ``prometheus_client``, one registry per engine.

What happens is counted as it happens (calls ending, requests submitted, bytes moved,
SSH commands); what *is* (workers attached, calls waiting, requests by stage, frames so
far) is read from the engine's own state at each scrape, so an idle engine does nothing
for its metrics between scrapes.

Every label value comes from a bounded set: where a call ran (``engine`` or ``worker``),
its outcome, worker labels and versions, provisioner and profile names from
``provisioners.json``, request stages, and the remote programs the Slurm provisioner
runs. Never a run id, a call id, a worker id or a token.
"""

from __future__ import annotations

import re
from collections import Counter as Tally
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fluksio.engine.dispatch.dispatcher import Dispatcher
from fluksio.engine.feed import LiveFeed
from fluksio.engine.stream import (
    ArtifactBytes,
    CommandRan,
    EngineStream,
    RequestAttached,
    RequestFailed,
    RequestSubmitted,
    RunsWritten,
)
from fluksio.engine.workers.registry import WorkerRegistry
from fluksio.wire.states import TERMINAL_NODE_STATES, NodeState

__all__ = ["CONTENT_TYPE", "EngineMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600)
_ATTACH_BUCKETS = (5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 43200)
_SSH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_PROGRAMS = frozenset(
    {
        "fluksio-submit",
        "fluksio-cancel",
        "sbatch",
        "squeue",
        "scancel",
        "sacct",
        "scontrol",
        "sinfo",
        "sh",
        "bash",
    }
)
"""Remote commands named as they are (a script run with ``sh -c`` by its name, as
``fluksio-submit``); any other is ``other`` (a plugin's own)."""


def _place_kind(place: str | None) -> str:
    return "engine" if place == "engine" else "worker"


class EngineMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.calls = Counter(
            "fluksio_node_calls",
            "Node calls that ended, by where they ran and how they ended.",
            ["place", "outcome"],
            registry=registry,
        )
        self.call_seconds = Histogram(
            "fluksio_node_call_duration_seconds",
            "How long node calls ran, from start to end.",
            ["place"],
            buckets=_CALL_BUCKETS,
            registry=registry,
        )
        self.queue_seconds = Histogram(
            "fluksio_node_call_queue_wait_seconds",
            "How long node calls waited for a place, from queued to started.",
            ["place"],
            buckets=_CALL_BUCKETS,
            registry=registry,
        )
        self.submissions = Counter(
            "fluksio_provisioning_submissions",
            "Machine requests submitted and taken by their system.",
            ["provisioner", "profile"],
            registry=registry,
        )
        self.failures = Counter(
            "fluksio_provisioning_failures",
            "Machine requests that ended without bringing a worker.",
            ["provisioner", "profile"],
            registry=registry,
        )
        self.attach_seconds = Histogram(
            "fluksio_provisioning_submit_to_attach_seconds",
            "From a machine request to its worker attaching.",
            ["provisioner", "profile"],
            buckets=_ATTACH_BUCKETS,
            registry=registry,
        )
        self.artifact_bytes = Counter(
            "fluksio_artifact_bytes",
            "Artifact bytes received (in) and sent (out) over HTTP.",
            ["direction"],
            registry=registry,
        )
        for direction in ("in", "out"):
            self.artifact_bytes.labels(direction)
        self.ssh_seconds = Histogram(
            "fluksio_ssh_command_duration_seconds",
            "Commands run on login nodes, connecting included, by whether they got there.",
            ["provisioner", "program", "outcome"],
            buckets=_SSH_BUCKETS,
            registry=registry,
        )
        self._started: set[str] = set()
        """Calls whose start was counted (their queue wait), until they end."""
        self._children: dict[tuple[object, ...], Any] = {}
        """A labelled child by its metric and labels: ``labels()`` takes a lock and checks
        its names at every call, and a call's end asks for three."""

    def watch(
        self,
        events: EngineStream,
        registry: WorkerRegistry,
        dispatcher: Dispatcher,
        feed: LiveFeed,
    ) -> None:
        """Count what the engine's stream tells as it happens; read the rest at each scrape."""
        events.subscribe(RunsWritten, self.runs_written)
        events.subscribe(RequestSubmitted, self._submitted)
        events.subscribe(RequestFailed, self._failed)
        events.subscribe(RequestAttached, self._attached)
        events.subscribe(CommandRan, self._command_ran)
        events.subscribe(ArtifactBytes, self._artifact_bytes)
        self.registry.register(_EngineState(registry, dispatcher, feed))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # -- what is counted as it happens ---------------------------------------------------

    def runs_written(self, event: RunsWritten) -> None:
        child = self._child
        for change in event.changes:
            for node in change.nodes:
                if node.call_id is None or node.started_at is None:
                    continue  # never started: not a call (a skipped node, say)
                place = _place_kind(node.place)
                if node.call_id not in self._started and node.queued_at is not None:
                    child(self.queue_seconds, place).observe(
                        max(0.0, node.started_at - node.queued_at)
                    )
                if node.state in TERMINAL_NODE_STATES:
                    self._started.discard(node.call_id)
                    child(self.calls, place, node.state.value).inc()
                    if node.ended_at is not None:
                        child(self.call_seconds, place).observe(
                            max(0.0, node.ended_at - node.started_at)
                        )
                elif node.state is NodeState.RUNNING:
                    self._started.add(node.call_id)

    def _child(self, metric: Counter | Histogram, *labels: str) -> Any:
        key = (metric, *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def _artifact_bytes(self, event: ArtifactBytes) -> None:
        self._child(self.artifact_bytes, event.direction).inc(event.size)

    def _submitted(self, event: RequestSubmitted) -> None:
        self.submissions.labels(event.provisioner, event.profile).inc()

    def _failed(self, event: RequestFailed) -> None:
        self.failures.labels(event.provisioner, event.profile).inc()

    def _attached(self, event: RequestAttached) -> None:
        self.attach_seconds.labels(event.provisioner, event.profile).observe(
            max(0.0, event.seconds)
        )

    def _command_ran(self, event: CommandRan) -> None:
        name = event.program.rsplit("/", 1)[-1]
        named = name if name in _PROGRAMS else "other"
        outcome = "reached" if event.reached else "failed"
        self.ssh_seconds.labels(event.provisioner, named, outcome).observe(event.seconds)


_STATE_FAMILIES: dict[str, tuple[type[GaugeMetricFamily | CounterMetricFamily], str, list[str]]] = {
    "fluksio_workers_attached": (
        GaugeMetricFamily,
        'Workers attached now, by each label they carry ("" for none), version and'
        " protocol; a worker with two labels counts under both.",
        ["label", "version", "protocol"],
    ),
    "fluksio_workers_refused": (
        GaugeMetricFamily,
        "Workers refused for their protocol (they need an upgrade), by version.",
        ["version"],
    ),
    "fluksio_calls_waiting": (
        GaugeMetricFamily,
        'Node calls waiting for a place, by the label they want ("" for any).',
        ["label"],
    ),
    "fluksio_provisioning_requests": (
        GaugeMetricFamily,
        "Live machine requests, by provisioner, profile and stage.",
        ["provisioner", "profile", "stage"],
    ),
    "fluksio_websocket_frames": (
        CounterMetricFamily,
        "WebSocket frames on the workers' attach sockets, pings included.",
        ["direction"],
    ),
    "fluksio_event_subscribers": (
        GaugeMetricFamily,
        "Streams of the live event feed open now.",
        [],
    ),
    "fluksio_store_unwritten_runs": (
        GaugeMetricFamily,
        "Runs whose changes wait in memory because the engine's store cannot be written"
        " (its disk full, its database away); 0 while it takes writes.",
        [],
    ),
    "fluksio_store_write_failures": (
        CounterMetricFamily,
        "Writes of the runs' changes that failed (disk full, database away) and were"
        " tried again, since the engine started.",
        [],
    ),
}
"""The families read from the engine's state at each scrape: declared once, so that the
registry knows their names when the collector is registered (a clash fails at start)."""


def _family(name: str) -> GaugeMetricFamily | CounterMetricFamily:
    kind, documentation, labels = _STATE_FAMILIES[name]
    return kind(name, documentation, labels=labels)


class _EngineState(Collector):
    """What the engine holds now, read at each scrape."""

    def __init__(self, registry: WorkerRegistry, dispatcher: Dispatcher, feed: LiveFeed) -> None:
        self._registry = registry
        self._dispatcher = dispatcher
        self._feed = feed

    def describe(self) -> Iterator[Metric]:
        for name in _STATE_FAMILIES:
            yield _family(name)

    def collect(self) -> Iterator[Metric]:
        attached = _family("fluksio_workers_attached")
        by_kind: Tally[tuple[str, str, str]] = Tally()
        for session in self._registry.attached():
            hello = session.hello
            version, protocol = hello.version or "0.1.x", str(hello.protocol)
            for label in hello.labels or [""]:
                by_kind[(label, version, protocol)] += 1
        for key, count in sorted(by_kind.items()):
            attached.add_metric(list(key), count)
        yield attached

        refused = _family("fluksio_workers_refused")
        refused_by: Tally[str] = Tally(
            _version_label(entry.version) for entry in self._registry.needs_upgrade()
        )
        for version, count in sorted(refused_by.items()):
            refused.add_metric([version], count)
        yield refused

        waiting = _family("fluksio_calls_waiting")
        for label, count in sorted(self._dispatcher.waiting_labels().items()):
            waiting.add_metric([label], count)
        yield waiting

        requests = _family("fluksio_provisioning_requests")
        for status in self._dispatcher.profiles():
            stages = Tally(job.stage.value for job in status.jobs)
            for stage, count in sorted(stages.items()):
                requests.add_metric([status.provisioner, status.profile.name, stage], count)
        yield requests

        frames = _family("fluksio_websocket_frames")
        frames.add_metric(["in"], self._registry.frames.received)
        frames.add_metric(["out"], self._registry.frames.sent)
        yield frames

        subscribers = _family("fluksio_event_subscribers")
        subscribers.add_metric([], self._feed.subscribers)
        yield subscribers

        unwritten = _family("fluksio_store_unwritten_runs")
        unwritten.add_metric([], self._dispatcher.unwritten_runs())
        yield unwritten

        failures = _family("fluksio_store_write_failures")
        failures.add_metric([], self._dispatcher.failed_writes())
        yield failures


_MAJOR_MINOR = re.compile(r"^(\d{1,2})\.(\d{1,2})(?:\D|$)")


def _version_label(version: str | None) -> str:
    """A refused worker's version as a label value from a bounded set: ``major.minor``
    (``0.1`` for 0.1.6), ``unknown`` without one, ``other`` for anything else."""
    if version is None:
        return "unknown"
    match = _MAJOR_MINOR.match(version)
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else "other"
