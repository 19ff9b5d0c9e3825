"""A worker's large frames judged by their first bytes, as they arrive.

aiohttp's WebSocket reader assembles a frame whole (about three times its size at the
peak) before it hands it on; only then could the engine see that a 60-MiB frame names no
call it awaits, or is an event, which may not exceed 1 MiB. :class:`FrameGate` stands
between the connection and that reader. It follows the frames' headers (RFC 6455 section
5.2) and, for a single text frame larger than ``above`` bytes, reads only its first
:data:`LEAD_BYTES` and asks ``judge``: pass it on, and the reader gets it unchanged; or
pass it over, and its remaining bytes are counted off as they arrive and never kept, and
the reader gets a small stand-in frame instead, in the same place among the others, so
the socket's handler hears of it in order. Everything else (small frames, control
frames, fragmented messages, frames over the reader's own ``most`` which it refuses from
their header) goes to the reader as it came.

Pure: bytes in, bytes to the reader out; no sockets, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Protocol

__all__ = ["LEAD_BYTES", "FrameGate", "text_frame"]

LEAD_BYTES = 256
"""How much of a large frame is read before it is judged."""

_CONTINUATION, _TEXT, _BINARY = 0x0, 0x1, 0x2


class Reader(Protocol):
    """What aiohttp's WebSocket reader offers the connection that feeds it."""

    def feed_data(self, data: bytes) -> tuple[bool, bytes]: ...

    def feed_eof(self) -> None: ...


Judge = Callable[[bytes, int], "bytes | None"]
"""``(first bytes, unmasked; the frame's size)``: None to pass the frame on, or the text
of the stand-in the reader gets in its place."""


def text_frame(payload: bytes) -> bytes:
    """A whole, final text frame as a client sends it (masked, with a mask of zeros, so
    the payload is as given)."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x81, 0x80 | size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x81, 0x80 | 126, size)
    else:
        head = struct.pack("!BBQ", 0x81, 0x80 | 127, size)
    return head + b"\0\0\0\0" + payload


class FrameGate:
    def __init__(self, reader: Reader, judge: Judge, *, above: int, most: int) -> None:
        self._reader = reader
        self._judge = judge
        self._above = above
        self._most = most
        self._state = "header"
        self._head = bytearray()
        """The current frame's header, as far as it has come."""
        self._lead = bytearray()
        """The first bytes of a frame to be judged, as far as they have come."""
        self._size = 0
        self._left = 0
        """Bytes of the current frame's payload still to come (passed on, or over)."""
        self._stand_in = b""
        self._in_message = False
        """A fragmented message is under way: its frames go to the reader as they come."""
        self.passed_over = 0
        """How many frames were passed over unread."""

    def feed_eof(self) -> None:
        self._reader.feed_eof()

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        """Read a chunk from the connection; hand the reader what it is to read."""
        if self._state == "forward" and self._left >= len(data):
            self._left -= len(data)  # the common case: a frame's middle, passed on whole
            if self._left == 0:
                self._state = "header"
            return self._reader.feed_data(data)
        if self._state == "header" and not self._head and self._one_small_frame(data):
            return self._reader.feed_data(data)  # the common case: a chunk, one whole frame
        for piece in self._pieces(data):
            eof, tail = self._reader.feed_data(piece)
            if eof:
                return eof, tail
        return False, b""

    def _one_small_frame(self, data: bytes) -> bool:
        """``data`` is exactly one whole frame, never judged (at most ``above`` bytes) and
        not part of a fragmented message: the reader reads it as it came."""
        whole = _head_in(data, 0)
        if not whole or self._in_message:
            return False
        final, opcode, _masked, size = _parse_head(data)
        return (
            final and opcode != _CONTINUATION and size <= self._above and whole + size == len(data)
        )

    def _pieces(self, data: bytes) -> list[bytes]:
        """What of ``data`` the reader is to read, in order, with stand-ins in place: the
        bytes passed on as they came in as few pieces as the frames judged allow."""
        out: list[bytes] = []
        at, end = 0, len(data)
        kept = -1  # where the run of bytes passed on as they came began (-1: none)
        while at < end:
            whole = _head_in(data, at) if self._state == "header" and not self._head else 0
            if self._state == "forward" or whole:
                kept = at if kept < 0 else kept
                if whole and self._judging(data[at : at + whole]):
                    out.append(data[kept:at])  # the run before this frame, then none
                    kept = -1
                    at += whole
                elif whole:
                    at += whole  # a header passed on in its run
                else:
                    at = self._forward(at, end)
                continue
            if kept >= 0:
                out.append(data[kept:at])
                kept = -1
            if self._state == "header":
                at = self._read_head(data, at, out)
            elif self._state == "lead":
                at = self._read_lead(data, at, out)
            else:
                at = self._skip(at, end, out)
        if kept == 0 and not out:
            return [data]  # the whole chunk, as it came: no copy
        if kept >= 0:
            out.append(data[kept:at])
        return [piece for piece in out if piece]

    def _forward(self, at: int, end: int) -> int:
        take = min(self._left, end - at)
        self._left -= take
        if self._left == 0:
            self._state = "header"
        return at + take

    def _read_lead(self, data: bytes, at: int, out: list[bytes]) -> int:
        want = min(LEAD_BYTES, self._size)
        take = min(want - len(self._lead), len(data) - at)
        self._lead += data[at : at + take]
        if len(self._lead) == want:
            self._judged(out)
        return at + take

    def _skip(self, at: int, end: int, out: list[bytes]) -> int:
        """The rest of a frame passed over, counted off; then its stand-in."""
        take = min(self._left, end - at)
        self._left -= take
        if self._left == 0:
            out.append(self._stand_in)
            self._state = "header"
        return at + take

    def _judging(self, head: bytes) -> bool:
        """Take a whole header: True if its frame is to be judged (the header is then kept
        until it is), else the frame is passed on and its payload follows."""
        final, opcode, masked, size = _parse_head(head)
        fresh = not self._in_message
        if opcode in (_TEXT, _BINARY) or (opcode == _CONTINUATION and final):
            self._in_message = not final
        self._size, self._left = size, size
        if opcode == _TEXT and final and masked and fresh and self._above < size < self._most:
            self._head = bytearray(head)
            self._state = "lead"
            return True
        self._state = "forward" if size else "header"
        return False

    def _read_head(self, data: bytes, at: int, out: list[bytes]) -> int:
        """Read a header that straddles chunks from ``at``; once whole, decide its frame."""
        take = min(_head_size(self._head) - len(self._head), len(data) - at)
        self._head += data[at : at + take]
        at += take
        if len(self._head) < _head_size(self._head):
            return at  # (two bytes first, then the rest their length flag says)
        head, self._head = bytes(self._head), bytearray()
        if not self._judging(head):
            out.append(head)
        return at

    def _judged(self, out: list[bytes]) -> None:
        head, lead = bytes(self._head), bytes(self._lead)
        self._head, self._lead = bytearray(), bytearray()
        mask = head[-4:]
        stand_in = self._judge(bytes(b ^ mask[i % 4] for i, b in enumerate(lead)), self._size)
        self._left = self._size - len(lead)
        if stand_in is None:
            out.append(head + lead)
            self._state = "forward" if self._left else "header"
            return
        self.passed_over += 1
        self._stand_in = text_frame(stand_in)
        if self._left:
            self._state = "skip"
        else:
            out.append(self._stand_in)
            self._state = "header"


def _head_in(data: bytes, at: int) -> int:
    """The length of the header at ``at`` when all of it is in ``data``, else 0."""
    if len(data) - at < 2:
        return 0
    flag = data[at + 1]
    size = 2 + (2 if flag & 0x7F == 126 else 8 if flag & 0x7F == 127 else 0)
    size += 4 if flag & 0x80 else 0
    return size if len(data) - at >= size else 0


def _head_size(head: bytearray) -> int:
    """A header's length, once its first two bytes are known (2 until then)."""
    if len(head) < 2:
        return 2
    flag = head[1] & 0x7F
    extra = 2 if flag == 126 else 8 if flag == 127 else 0
    return 2 + extra + (4 if head[1] & 0x80 else 0)


def _parse_head(head: bytes) -> tuple[bool, int, bool, int]:
    """(final, opcode, masked, payload size) of a whole header (at the start of ``head``)."""
    flag = head[1] & 0x7F
    if flag == 126:
        size = struct.unpack_from("!H", head, 2)[0]
    elif flag == 127:
        size = struct.unpack_from("!Q", head, 2)[0]
    else:
        size = flag
    return bool(head[0] & 0x80), head[0] & 0x0F, bool(head[1] & 0x80), size
