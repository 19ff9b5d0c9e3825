"""What the agent spends reading a run frame, beside the floor of parsing its JSON.

Since issue 66 the agent reads every frame of the engine's with one generic decoder driven
by the frames' dataclasses (``fluksio/agent/protocol/codec.py``) instead of a hand-written reader
per frame. This measures, per frame of a typical call (a token, a device, a limit, some
arguments): ``json.loads`` of its text (the floor: what any reading starts with), the
agent's reading of the parsed frame, and the engine's encoding of it.

Run: ``.venv/bin/python bench/frame_decoding.py [--number N]``; a build before issue 66
reads with ``read_engine_frame`` (and keeps its frames in ``fluksio.agent.frames``), so
the same script measures either, side by side.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import timeit
from collections.abc import Callable
from typing import Any

FRAME = {
    "op": "run",
    "call_id": "0123456789abcdef0123456789abcdef",
    "flow": "train",
    "node": "fit",
    "source": "def process(x=1):\n    return x\n" * 8,
    "kwargs": {"x": 1, "path": "/data/set", "ids": list(range(16))},
    "run": {"id": "fedcba9876543210fedcba9876543210"},
    "timeout": 30.0,
    "env": {"CUDA_VISIBLE_DEVICES": "0", "FLUKSIO_ARTIFACT_TOKEN": "t" * 220},
    "limit": 60.0,
    "ram_mb": 100,
}


def _frames() -> Any:
    """The frames module of the build this runs on (it moved in issue 66)."""
    try:
        return importlib.import_module("fluksio.agent.protocol.frames")
    except ModuleNotFoundError:
        return importlib.import_module("fluksio.agent.frames")


def _per_frame_us(work: Callable[[], object], number: int) -> float:
    return min(timeit.repeat(work, number=number, repeat=5)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--number", type=int, default=20_000)
    args = parser.parse_args()
    text = json.dumps(FRAME)
    frames = _frames()
    read: Callable[[Any], Any] = getattr(frames, "from_engine", None) or frames.read_engine_frame
    frame = read(FRAME)
    floor = _per_frame_us(lambda: json.loads(text), args.number)
    rows = [
        ("floor: json.loads of the frame's text", floor),
        ("the agent reads the parsed frame", _per_frame_us(lambda: read(FRAME), args.number)),
        ("the engine encodes the frame", _per_frame_us(lambda: frames.encode(frame), args.number)),
    ]
    print(f"Python {sys.version.split()[0]}; {len(text)} bytes a frame")
    print(f"{'measure':<45} {'us/frame':>9} {'x floor':>8}")
    for name, value in rows:
        print(f"{name:<45} {value:>9.1f} {value / floor:>8.1f}")


if __name__ == "__main__":
    main()
