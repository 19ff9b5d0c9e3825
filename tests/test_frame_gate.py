"""The gate before aiohttp's WebSocket reader: a large frame no call awaits is passed over
as it arrives, never held; everything else reaches the reader byte for byte.

The reader here records what it is fed; the frames are made as a client makes them
(masked), split at any place the network may split them.
"""

from __future__ import annotations

import os
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from fluksio.api.frame_gate import LEAD_BYTES, FrameGate, text_frame
from tests.support.properties import tried

ABOVE = 1000
MOST = 100_000


class Recorder:
    def __init__(self) -> None:
        self.fed: list[bytes] = []

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.fed.append(bytes(data))
        return False, b""

    def feed_eof(self) -> None:
        self.fed.append(b"<eof>")


def client_frame(payload: bytes, *, opcode: int = 0x1, final: bool = True) -> bytes:
    """A frame as a client sends it, with a mask that changes every byte."""
    first = (0x80 if final else 0) | opcode
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", first, 0x80 | size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", first, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", first, 0x80 | 127, size)
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _answer(call_id: str, size: int) -> bytes:
    lead = f'{{"call_id": "{call_id}", "ok": true, "result": "'.encode()
    return lead + b"x" * (size - len(lead) - 2) + b'"}'


def _judge_passing(call_ids: set[str]) -> tuple[list[tuple[bytes, int]], object]:
    asked: list[tuple[bytes, int]] = []

    def judge(lead: bytes, size: int) -> bytes | None:
        asked.append((lead, size))
        named = lead.split(b'"')[3].decode()
        return None if named in call_ids else f"passed over {named} {size}".encode()

    return asked, judge


def _feed(gate: FrameGate, stream: bytes, cuts: list[int]) -> None:
    at = 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        if cut > at:
            gate.feed_data(stream[at:cut])
            at = cut


def test_a_large_frame_no_call_awaits_never_reaches_the_reader_whole() -> None:
    reader = Recorder()
    asked, judge = _judge_passing({"awaited"})
    gate = FrameGate(reader, judge, above=ABOVE, most=MOST)  # type: ignore[arg-type]
    before = client_frame(b'{"call_id": "a", "event": "heartbeat"}')
    stray = client_frame(_answer("stray", 90_000))
    after = client_frame(b'{"call_id": "a", "event": "heartbeat"}')
    stream = before + stray + after
    _feed(gate, stream, list(range(0, len(stream), 4096)))  # as the network hands it over
    fed = b"".join(reader.fed)
    assert fed == before + text_frame(b"passed over stray 90000") + after
    assert max(len(piece) for piece in reader.fed) < 4096 + 200, "never more than a chunk"
    assert [(lead[:21], size) for lead, size in asked] == [(b'{"call_id": "stray", ', 90_000)]
    assert len(asked[0][0]) == LEAD_BYTES and gate.passed_over == 1


def test_an_awaited_answer_a_small_frame_and_a_fragmented_message_pass_unchanged() -> None:
    reader = Recorder()
    asked, judge = _judge_passing({"awaited"})
    gate = FrameGate(reader, judge, above=ABOVE, most=MOST)  # type: ignore[arg-type]
    stream = (
        client_frame(_answer("awaited", 50_000))
        + client_frame(b"small")
        + client_frame(b"ping", opcode=0x9)
        + client_frame(_answer("stray", 5_000)[:3000], final=False)
        + client_frame(b"x" * 2000, opcode=0x0, final=True)
        + client_frame(_answer("over", MOST + 10))  # the reader refuses it by its header
    )
    _feed(gate, stream, [1, 2, 3, 70, 5000, 52_000])
    assert b"".join(reader.fed) == stream
    assert [lead.split(b'"')[3] for lead, _size in asked] == [b"awaited"]
    gate.feed_eof()
    assert reader.fed[-1] == b"<eof>"


@settings(max_examples=tried(150), deadline=None)
@given(
    frames=st.lists(
        st.tuples(st.sampled_from(["awaited", "stray"]), st.integers(min_value=40, max_value=6000)),
        min_size=1,
        max_size=6,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=40_000), max_size=30),
    one_frame_a_chunk=st.booleans(),
)
def test_whatever_the_splits_the_reader_gets_each_frame_or_its_stand_in(
    frames: list[tuple[str, int]], cuts: list[int], one_frame_a_chunk: bool
) -> None:
    reader = Recorder()
    _asked, judge = _judge_passing({"awaited"})
    gate = FrameGate(reader, judge, above=ABOVE, most=MOST)  # type: ignore[arg-type]
    stream, expected = b"", b""
    bounds = []
    for call_id, size in frames:
        frame = client_frame(_answer(call_id, size))
        stream += frame
        bounds.append(len(stream))
        passed = call_id == "stray" and size > ABOVE
        expected += text_frame(f"passed over stray {size}".encode()) if passed else frame
    # As a socket mostly reads them, each chunk one whole frame; or anywhere.
    _feed(gate, stream, bounds[:-1] if one_frame_a_chunk else [c for c in cuts if c < len(stream)])
    assert b"".join(reader.fed) == expected
