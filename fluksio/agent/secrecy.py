"""The worker token kept from the calls the agent runs: they run as the agent's user.

A process of the same user may read another's ``/proc/PID/environ`` and ``cmdline``, and
attach a debugger to it. So, once the token is read (from ``$FLUKSIO_WORKER_TOKEN`` or
``--token``), the agent:

- removes the variable from its environment (so nothing it starts inherits it);
- overwrites the token where the kernel shows the process's start (its arguments and
  first environment, through ``/proc/self/mem``), so ``ps`` and ``environ`` show ``*``;
- marks itself not dumpable (``prctl(PR_SET_DUMPABLE, 0)``, as ssh-agent does): its
  ``/proc`` files become root's, no debugger of its user may attach, no core is written.

Calls are started by the runner, a process of its own that never held the token; what is
left to a call of the same user is what any process of that user could do before the
agent read it (the first moment of its start; a variable set in a shell that lives on).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

__all__ = ["TOKEN_VARIABLE", "hide_token"]

TOKEN_VARIABLE = "FLUKSIO_WORKER_TOKEN"  # noqa: S105 (a variable's name)
_PR_SET_DUMPABLE = 4


def hide_token(token: str) -> None:
    """Keep ``token`` from every other process of this user (see the module)."""
    os.environ.pop(TOKEN_VARIABLE, None)
    if sys.platform != "linux" or not token:
        return
    with contextlib.suppress(OSError, ValueError):
        _blank_start(token.encode())
    _not_dumpable()


def _blank_start(secret: bytes) -> None:
    """Overwrite ``secret`` in the arguments and environment the process started with."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    # Fields 48 to 51 (proc(5)): arg_start, arg_end, env_start, env_end; 3 is fields[0].
    arg_start, arg_end, env_start, env_end = (int(fields[n - 3]) for n in range(48, 52))
    with open("/proc/self/mem", "r+b", buffering=0) as memory:
        for start, end in ((arg_start, arg_end), (env_start, env_end)):
            memory.seek(start)
            region = memory.read(end - start)
            found = region.find(secret)
            while found >= 0:
                memory.seek(start + found)
                memory.write(b"*" * len(secret))
                found = region.find(secret, found + len(secret))


def _not_dumpable() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
