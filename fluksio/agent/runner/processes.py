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


SHM = "/dev/shm"  # noqa: S108 (read, never written: what calls hold there is counted)


def tree_memory(
    root: int,
    within: int | None = None,
    *,
    shm_seen: dict[tuple[int, int], str] | None = None,
    look: bool = True,
    shm: str = SHM,
) -> int | None:
    """The memory ``root`` and every process below it hold, in bytes, as the kernel
    counts what is theirs: each process's proportional share (``Pss``) of its anonymous
    and shared memory, so a page several of them share (copy-on-write after a fork, a
    shared ``mmap``) counts once in all, and a file's pages (which the kernel may drop
    and read again) not at all; and, given ``shm_seen``, the files in ``shm`` (tmpfs:
    memory) they hold open, or held open at an earlier reading and left there
    (:func:`shm_memory`; ``look``: look for newly opened ones this time). None once
    ``root`` is gone.

    Given ``within``, a cheap upper bound (each process's resident anonymous and shared
    pages, from ``status``) is answered instead while it is within it: the proportional
    shares cost the kernel a walk of every page, eight times the read."""
    pids = [root, *_descendants(root)]
    outside = 0 if shm_seen is None else shm_memory(pids, shm_seen, shm, look=look)
    if within is not None:
        upper = _summed(pids, _upper_memory)
        if upper is None or upper + outside <= within:
            return None if upper is None else upper + outside
    held = _summed(pids, _own_memory)
    return None if held is None else held + outside


def shm_memory(
    pids: list[int], seen: dict[tuple[int, int], str], shm: str = SHM, *, look: bool = True
) -> int:
    """The bytes in files under ``shm`` that ``pids`` hold open now, or held open at an
    earlier reading (``seen``, by device and inode, kept up to date here) and left there,
    each once. A file they map is left out: its pages are in their own ``Pss_Shmem``.
    ``look`` False: only the files seen before are read (looking through every open file
    costs a read of each descriptor).

    Only what the call's own processes opened counts: another process of the same user,
    another call among them, writing there is never taken for this call's (a file written
    and closed between two looks is missed)."""
    held = _shm_held(pids, shm) if look else {}
    for key, (path, _size) in held.items():
        seen[key] = path
    if not seen:
        return 0
    mapped = _shm_mapped(pids, shm)
    total = 0
    for key, path in list(seen.items()):
        size = held[key][1] if key in held else _left_size(path, key)
        if size is None:
            del seen[key]  # removed, or another file by its name now
        elif key[1] not in mapped:
            total += size
    return total


def _shm_held(pids: list[int], shm: str) -> dict[tuple[int, int], tuple[str, int]]:
    """The files under ``shm`` that ``pids`` hold open: by device and inode, path and size."""
    held: dict[tuple[int, int], tuple[str, int]] = {}
    prefix = shm.rstrip("/") + "/"
    for pid in pids:
        folder = f"/proc/{pid}/fd"
        try:
            names = os.listdir(folder)
        except OSError:
            continue  # it ended meanwhile
        for name in names:
            try:
                target = os.readlink(f"{folder}/{name}")
                if not target.startswith(prefix):
                    continue
                info = os.stat(f"{folder}/{name}")
            except OSError:
                continue
            held[(info.st_dev, info.st_ino)] = (target, info.st_blocks * 512)
    return held


def _shm_mapped(pids: list[int], shm: str) -> set[int]:
    """The inodes of the files under ``shm`` that ``pids`` map."""
    mapped: set[int] = set()
    prefix = " " + shm.rstrip("/") + "/"
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", "rb") as handle:
                lines = [line for line in handle if prefix.encode() in line]
        except OSError:
            continue
        mapped.update(int(line.split()[4]) for line in lines)
    return mapped


def _left_size(path: str, key: tuple[int, int]) -> int | None:
    """The size of the file a call left at ``path``, if it is still that file."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_blocks * 512 if (info.st_dev, info.st_ino) == key else None


def _summed(pids: list[int], read: Callable[[int], int | None]) -> int | None:
    """``read`` of each process, summed; None when the first (the root) is gone."""
    held = 0
    for pid in pids:
        found = read(pid)
        if found is None:
            if pid == pids[0]:
                return None
            continue  # it ended meanwhile
        held += found
    return held


def _upper_memory(pid: int) -> int | None:
    """``RssAnon + RssShmem`` of ``status``: at least the process's proportional share."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            status = handle.read()
    except OSError:
        return None
    kib = sum(
        int(line.split()[1])
        for line in status.splitlines()
        if line.startswith((b"RssAnon:", b"RssShmem:"))
    )
    return kib * 1024


def _own_memory(pid: int) -> int | None:
    """``Pss_Anon + Pss_Shmem`` of ``smaps_rollup``; where the kernel has no such lines
    (before Linux 5.6), resident less file-backed from ``statm``."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            rollup = handle.read()
    except FileNotFoundError:
        rollup = b""
    except OSError:
        return None
    kib = 0
    for line in rollup.splitlines():
        if line.startswith((b"Pss_Anon:", b"Pss_Shmem:")):
            kib += int(line.split()[1])
    if b"Pss_Anon:" in rollup:
        return kib * 1024
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            # size resident shared text lib data dt, in pages; "shared" is file-backed
            fields = handle.read().split()
    except OSError:
        return None
    return (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")


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
