"""What the typed boundaries cost per call, beside plain JSON in the same run.

Every call crosses three of them in the engine: the run's answer (a pydantic response
model written as JSON), the ``run`` frame sent to a worker (a dataclass of
``fluksio.agent.protocol.frames`` encoded), and the worker's answer (validated with a pydantic
``TypeAdapter`` over the same dataclasses). The floor beside each is ``json.dumps`` or
``json.loads`` of the same payload as a plain dict: what no typing at all would cost.

Run: ``.venv/bin/python bench/boundaries.py [--repeat N]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from fluksio.agent.protocol.frames import RunFrame, RunRef, encode
from fluksio.engine.runs.answers import run_body
from fluksio.engine.runs.machine.rows import NodeRow, RunRow
from fluksio.engine.runs.views import NodeView, RunView
from fluksio.engine.workers.protocol import parse_worker_frame
from fluksio.wire.states import NodeState, RunState


def _per_call_us(work: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeat):
            work()
        samples.append((time.perf_counter() - started) / repeat * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20000)
    repeat = parser.parse_args().repeat

    now = time.time()
    run = RunRow("abc", "f", {}, {"x": 1}, RunState.SUCCEEDED, now, now, now)
    node = NodeRow("n", NodeState.SUCCEEDED, "c", "gpu-a", now, now, now, {"a": 1}, None, "", [])
    view = RunView(run, (NodeView(node, None, 0),))
    plain_run = json.loads(run_body(view).model_dump_json())
    frame = RunFrame(
        call_id="c1", flow="f", node="n", source="def process(x):\n    return x\n",
        kwargs={"x": 1}, run=RunRef(id="abc"), env={"OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    plain_frame = json.loads(encode(frame))
    answer = {"call_id": "c1", "ok": True, "result": {"a": 1}, "logs": ""}
    answer_text = json.dumps(answer)

    rows = [
        (
            "run answer: response model -> JSON",
            _per_call_us(lambda: run_body(view).model_dump_json(), repeat),
            _per_call_us(lambda: json.dumps(plain_run), repeat),
        ),
        (
            "run frame: dataclass -> JSON",
            _per_call_us(lambda: encode(frame), repeat),
            _per_call_us(lambda: json.dumps(plain_frame), repeat),
        ),
        (
            "worker answer: JSON -> validated frame",
            _per_call_us(lambda: parse_worker_frame(answer_text), repeat),
            _per_call_us(lambda: json.loads(answer_text), repeat),
        ),
    ]
    print(f"{'boundary (per call)':42} {'typed us':>9} {'plain us':>9} {'ratio':>6}")
    for name, typed, plain in rows:
        print(f"{name:42} {typed:9.2f} {plain:9.2f} {typed / plain:6.1f}")


if __name__ == "__main__":
    main()
