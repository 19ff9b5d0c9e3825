"""The client as :mod:`fluksio.client.executor` sees it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from fluksio.client.map_futures import Answer, ItemsOfRuns
from fluksio.client.sse import ReceivedEvent
from fluksio.wire.answers.resources import ArtifactRef
from fluksio.wire.answers.runs import RunBody

__all__ = ["Engine"]


class Engine(ItemsOfRuns, Protocol):
    """What of :class:`~fluksio.client.client.Client` an executor uses (a protocol, so
    that the client, which makes executors, and this module do not import each other);
    a map's futures use a part of it."""

    def put_flow(
        self, name: str, nodes: list[dict[str, Any]], *, transient: bool = False
    ) -> object: ...

    def start_run(self, flow: str, params: dict[str, Any] | None = None) -> RunBody: ...

    def run(self, run_id: str) -> RunBody: ...

    def put_artifact(
        self, data: bytes | Path, *, name: str = "", media_type: str | None = None
    ) -> ArtifactRef: ...

    def wait_run(self, run_id: str, timeout: float | None = None) -> RunBody: ...

    def cancel_run(self, run_id: str, *, wait: int = 0) -> RunBody: ...

    def unsent_again(self, change: Callable[[], Answer]) -> Answer: ...

    def events(
        self,
        *,
        run: str | None = None,
        last_id: str | None = None,
        reconnects: int | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[ReceivedEvent]: ...
