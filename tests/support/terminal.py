"""A command in a real pseudo-terminal, answered at its prompts as a person would."""

from __future__ import annotations

import os
import pty
import select
import time
from collections.abc import Callable, Sequence

__all__ = ["in_terminal"]


def in_terminal(
    argv: Sequence[str],
    answers: Sequence[tuple[str, Callable[[], str]]],
    *,
    env: dict[str, str],
    timeout: float = 60,
) -> tuple[int, str]:
    """Run ``argv`` on a pty; when the screen shows each prompt in turn, type its answer
    (made at that moment: a one-time code must be fresh) and Enter. Returns the exit
    status and all the terminal showed. Every wait is bounded by ``timeout``."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its terminal
        os.execvpe(argv[0], list(argv), env)  # noqa: S606 (argv, no shell: as intended)
    deadline = time.monotonic() + timeout
    shown = b""
    pending = list(answers)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{argv[0]} still running after {timeout} s: {shown!r}")
            readable, _, _ = select.select([fd], [], [], min(left, 0.5))
            if readable:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:  # EIO: the terminal's last writer has gone
                    chunk = b""
                if not chunk:
                    break
                shown += chunk
            if pending and pending[0][0].encode() in shown.split(b"\n")[-1]:
                _prompt, answer = pending.pop(0)
                os.write(fd, answer().encode() + b"\n")
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), shown.decode(errors="replace")
