"""A call's process tree: dying with the parent, a subreaper, and killing all that a
call started (through ``/proc``), however it left its group."""

from __future__ import annotations

import os
import signal
import time

# Not `from typing import TYPE_CHECKING`: importing typing costs a spawned call
# milliseconds. Type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: nothing here is imported when the runner runs
    from collections.abc import Callable
    from typing import Any


_prctl: Any = None


def _load_prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once (the fork server does it before any fork)."""
    global _prctl  # noqa: PLW0603 - looked up once per process, by design
    if _prctl is None:
        try:
            import ctypes

            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (ImportError, OSError, AttributeError):
            _prctl = False  # an image whose Python has no ctypes: nothing to ask for
    return _prctl or None


def die_with_parent(parent_pid: int, death_signal: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``death_signal`` when this process's parent dies; no-op elsewhere."""
    prctl = _load_prctl()
    if not prctl:
        return
    pr_set_pdeathsig = 1
    prctl(pr_set_pdeathsig, death_signal, 0, 0, 0)
    if parent_pid and os.getppid() != parent_pid:
        os._exit(1)  # the parent died before the request took effect


def become_subreaper() -> None:
    """Adopt this process's orphaned descendants (Linux), instead of letting init have them.

    A node's grandchild whose parent exits, or that left the call's process group with
    ``setsid``, stays in this process's tree, where :func:`_kill_below` finds it. Not
    inherited across ``fork``: each call process asks for itself.
    """
    prctl = _load_prctl()
    if prctl:
        pr_set_child_subreaper = 36
        prctl(pr_set_child_subreaper, 1, 0, 0, 0)


def children_of(pid: int) -> list[int] | None:
    """``pid``'s children, each thread's included (Linux); None where ``/proc`` cannot say.

    Reads ``/proc/PID/task/TID/children``: one small file per thread, where a scan of
    every process costs milliseconds, so asking at the end of every call is cheap.
    """
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    found: list[int] = []
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children", "rb") as handle:
                found.extend(int(child) for child in handle.read().split())
        except FileNotFoundError:
            if os.path.isdir(f"/proc/{pid}/task/{thread}"):
                return None  # a kernel built without CONFIG_PROC_CHILDREN
        except OSError:
            continue  # the thread ended meanwhile
    return found


def parent_map() -> dict[int, list[int]]:
    """Every process's children, by a scan of ``/proc`` (kernels without ``children``)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue  # it ended meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces or parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def _descendants(root: int) -> list[int]:
    """Every process below ``root``, from ``/proc`` (empty where there is none)."""
    scanned: dict[int, list[int]] | None = None
    found: list[int] = []
    pending = [root]
    while pending:
        pid = pending.pop()
        below = children_of(pid) if scanned is None else None
        if below is None:
            if scanned is None:
                scanned = parent_map()
            below = scanned.get(pid, [])
        found.extend(below)
        pending.extend(below)
    return found


def tree_memory(root: int) -> int | None:
    """The memory ``root`` and every process below it hold, in bytes: resident and not
    mapped from a file (a file's pages the kernel may drop and read again), as a call's
    memory limit counts it. None once ``root`` is gone."""
    page = os.sysconf("SC_PAGE_SIZE")
    held = 0
    for pid in [root, *_descendants(root)]:
        try:
            with open(f"/proc/{pid}/statm", "rb") as handle:
                # size resident shared text lib data dt, in pages; "shared" is file-backed
                fields = handle.read().split()
        except OSError:
            if pid == root:
                return None
            continue  # it ended meanwhile
        held += (int(fields[1]) - int(fields[2])) * page
    return held


def is_running(pid: int) -> bool:
    """Whether ``pid`` exists and has not ended (a zombie has ended: it only awaits reaping)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


def signal_tree(root: int, signum: int) -> None:
    """Send ``signum`` to ``root`` and to every process below it."""
    import contextlib

    for pid in [root, *_descendants(root)]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _kill_below(root: int) -> None:
    """SIGKILL every process below ``root`` and wait until none is running; no reaping.

    ``root`` is a subreaper (or stopped), so what it started stays below it however it
    forked, and a process that forks while this runs is found in the next round. Reaping
    is the caller's: the fork server must report each call's exit, not lose it here.
    """
    import contextlib

    for _ in range(200):  # a tree still forking is outrun within a few rounds
        below = [pid for pid in _descendants(root) if is_running(pid)]
        if not below:
            return
        for pid in below:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.005)


def kill_call(pid: int) -> None:
    """End a call process and everything it started, however it left its group.

    Stopped first, it forks nothing more; what it started is killed while it still holds
    them as a subreaper; then the process itself.
    """
    import contextlib

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGSTOP)
    _kill_below(pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # a group of its own, spawned or forked
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def end_descendants() -> None:
    """At the end of a call, in its process: nothing it started outlives it."""
    children = children_of(os.getpid())
    if children == []:
        return  # the usual case: one small read, nothing to do
    _kill_below(os.getpid())


def kill_tree(root: int) -> None:
    """SIGKILL everything below ``root`` and reap what is ours (its own exit, not a call's)."""
    _kill_below(root)
    _reap_any()


def _reap_any() -> None:
    """Collect exited children (adopted orphans included) so they do not linger as zombies."""
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def kill_tree_and_exit(signum: int, _frame: object) -> None:
    kill_tree(os.getpid())
    os._exit(128 + signum)


def end_with_lifeline(fd: int) -> None:
    """End this call, and all it started, when ``fd`` reads its end: its launcher holds
    the other end, so the call ends with the launcher however that ends, even where no
    signal of the launcher's death reaches it (a container, whose parent is its runtime's).
    Watched by a thread of its own, blocked in ``read``."""
    import threading

    os.set_inheritable(fd, False)  # the node's own processes never hold it

    def watch() -> None:
        while True:
            try:
                if not os.read(fd, 4096):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        kill_tree_and_exit(signal.SIGTERM, None)

    threading.Thread(target=watch, name="fluksio-lifeline", daemon=True).start()
