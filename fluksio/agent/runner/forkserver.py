"""The fork server: one child forked per call, ahead of need (see the package's
docstring)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys

from fluksio.agent.runner.environment import drop_credentials
from fluksio.agent.runner.node import run_spec, source_name
from fluksio.agent.runner.processes import (
    become_subreaper,
    children_of,
    die_with_parent,
    end_descendants,
    exit_on_signal,
    is_running,
    kill_call,
    kill_tree,
    parent_map,
    signal_tree,
)
from fluksio.agent.runner.protocol import (
    MAX_MESSAGE_BYTES,
    PROTOCOL,
    REAP_INTERVAL_MS,
    RECORD_FD,
    SPARES,
)

# Not `from typing import TYPE_CHECKING`: importing typing costs a spawned call
# milliseconds. Type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: nothing here is imported when the runner runs
    import socket
    from typing import Any


def _recv_request(
    sock: socket.socket,
) -> tuple[bytes, dict[str, Any] | None, bytes | None, list[int]]:
    """A request as received, its header, the spec carried inline (if any), its descriptors."""
    import socket

    try:
        message, fds, _flags, _addr = socket.recv_fds(sock, MAX_MESSAGE_BYTES, 4)
    except ConnectionError:
        return b"", None, None, []
    if not message:
        return b"", None, None, []
    header, _, spec = message.partition(b"\n")
    return message, json.loads(header), (spec or None), fds


def _send(sock: socket.socket, payload: object) -> None:
    sock.sendall(json.dumps(payload).encode())


def serve(control_fd: int, parent_pid: int = 0) -> None:
    """Fork one child per call for the client on ``control_fd`` (AF_UNIX, SOCK_SEQPACKET).

    A call's request is one message: a JSON header line (``{"op": "fork", "id": n}``)
    followed by the call's spec, with two descriptors (output, records); a spec too large
    for one message comes through a pipe instead, as a third descriptor first.

    The server keeps :data:`SPARES` children forked ahead and offers each as ``{"op":
    "spare", "pid"}`` with the spare's own socket as a descriptor. The client sends a
    request straight to the oldest one's socket, then tells the server ``{"op": "took",
    "pid"}``, and the server forks a replacement. A client with no spare at hand sends
    the request to the server itself, which answers ``{"op": "forked", "id", "pid"}``.

    ``{"op": "kill", "pid"}`` kills that call and everything it started (:func:`kill_call`);
    ``{"op": "term", "pid"}`` sends SIGTERM to all of them, the client following up with a
    kill after a grace; ``{"op": "notice", "pid", "signal"}`` sends the call's process
    alone that signal (its notice that it will be stopped). Each child's exit is reported
    as ``{"op": "exit", "pid", "status"}`` (``status`` is the exit code, or minus the
    signal number), a spare's too.
    On EOF every call's tree is killed and the server exits: a client that dies takes its
    calls with it.

    **No process outlives its call.** Each call process is a subreaper, so whatever it
    starts stays below it however it forks (``setsid``, a double fork). A call that
    returns kills what is left below it before it exits (:func:`end_descendants`); one
    that is killed takes its tree along (:func:`kill_call`); and what escapes a call
    process that died anyway (SIGTERM, out of memory) is orphaned to this server, a
    subreaper too, which kills every child of its own that is no call when a call ends.
    """
    # What every call needs, imported once here rather than in each child. None of these
    # reads a thread-cap or device variable or starts a thread; threading is left out on
    # purpose (see Records).
    import gc
    import linecache  # noqa: F401
    import select
    import socket
    import types  # noqa: F401

    # Its client dying (even by SIGKILL) ends it through the finally below, which kills
    # every call's whole tree: SIGTERM, not SIGKILL, so that the finally runs.
    die_with_parent(parent_pid, signal.SIGTERM)
    signal.signal(signal.SIGTERM, exit_on_signal)
    become_subreaper()
    drop_credentials()
    # A child's prints reach fd 1 through this same object; line-buffered, each line
    # counts as the node reporting (the silence timeout) as soon as it is printed.
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    # A process's first call initialises internals (compile, JSON, the interpreter's
    # specialised bytecode of every function on the path) worth a millisecond; rehearse
    # one here, so that children inherit the result. Then freeze what exists so that no
    # child's collector walks (and so copies) the server's pages.
    _rehearse()
    gc.collect()
    gc.freeze()
    sock = socket.socket(fileno=control_fd)
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    live: set[int] = set()
    _send(
        sock,
        {
            "op": "ready",
            "protocol": PROTOCOL,
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "executable": sys.executable,
        },
    )
    spares: set[int] = set()  # forked ahead, offered to the client, not yet taken
    for _ in range(SPARES):
        _offer_spare(sock, spares, live)
    try:
        while True:
            # No SIGCHLD handler: children are reaped here, after each request and at
            # least every REAP_INTERVAL_MS, which costs the busy path nothing.
            if poller.poll(REAP_INTERVAL_MS if live or spares else None):
                message, header, _spec, fds = _recv_request(sock)
                if header is None:
                    return
                if header["op"] == "took" and header["pid"] in spares:
                    spares.discard(header["pid"])
                    live.add(header["pid"])
                    _offer_spare(sock, spares, live)
                elif header["op"] == "fork":  # the client had no spare at hand
                    pid = _fork_for(sock, message, fds)
                    live.add(pid)
                    _send(sock, {"op": "forked", "id": header["id"], "pid": pid})
                elif header["op"] in ("kill", "term", "notice") and header["pid"] in live:
                    _signal_call(header)
            spare_ended, call_ended = _reap(sock, live, spares)
            if call_ended:
                _sweep_orphans(live | spares)
            if spare_ended:
                _offer_spare(sock, spares, live)  # a spare was killed before it was taken
    finally:
        # The client's death delivers SIGTERM (PDEATHSIG) just after its EOF, which may
        # have brought us here already: its handler may raise once more, before the clean-
        # up ignores it. Nothing may cut the clean-up short: every call would die by its
        # own PDEATHSIG and leave what it started (a setsid'd process) orphaned to init.
        try:
            _end_every_call(live | spares)
        except SystemExit:
            _end_every_call(live | spares)


def _signal_call(header: dict[str, Any]) -> None:
    """A call's tree killed (``kill``) or sent SIGTERM (``term``), or its process alone
    sent its notice (``notice``)."""
    pid = header["pid"]
    if header["op"] == "kill":
        kill_call(pid)
    elif header["op"] == "term":
        signal_tree(pid, signal.SIGTERM)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, header["signal"])


def _end_every_call(calls: set[int]) -> None:
    """Kill every call's tree, and what calls that ended earlier left orphaned here;
    SIGTERM is ignored from its first line on."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for pid in calls:
        kill_call(pid)
    kill_tree(os.getpid())


# Forking costs the server more than a millisecond here (its page tables, then the faults
# of the pages it shares with the child), and so do a new process's first writes. So the
# server keeps call processes forked ahead, *spares*, and hands the client each spare's
# own socket: a call's request then crosses one socket, to a process that is ready. A
# spare runs exactly one call, like any call process; none is ever reused.


def _fork_spare(control: socket.socket, rehearse: bool) -> tuple[int, socket.socket]:
    """A call process waiting for its one request on a socket of its own: (pid, inbox)."""
    import socket

    inbox, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(control.fileno())
            os.close(inbox.fileno())
            code = _wait_for_call(theirs, rehearse)
        except BaseException:  # a child must never return into the server
            code = 70
        os._exit(code)
    theirs.close()
    return pid, inbox


def _offer_spare(control: socket.socket, spares: set[int], live: set[int]) -> None:
    import socket

    # A rehearsal saves a call's latency but not its work: worth it while calls come one
    # at a time (the last one may still be exiting), not in a burst, where the spare is
    # taken at once and the rehearsal would make its call wait.
    pid, inbox = _fork_spare(control, rehearse=len(live) <= 2)
    spares.add(pid)
    try:
        offer = json.dumps({"op": "spare", "pid": pid}).encode()
        socket.send_fds(control, [offer], [inbox.fileno()])
    finally:
        inbox.close()


def _fork_for(control: socket.socket, message: bytes, fds: list[int]) -> int:
    """A call process for a request that came to the server itself; its pid."""
    import socket

    pid, inbox = _fork_spare(control, rehearse=False)
    try:
        socket.send_fds(inbox, [message], fds)
    finally:
        inbox.close()
        for fd in fds:
            os.close(fd)
    return pid


_REHEARSAL = json.dumps(
    {
        "op": "run",
        "source": "def process(x=1):\n    return {'a': [x, 1.5, None, 'text']}\n",
        "node": "rehearsal",
        "flow": "",
        "kwargs": {"x": 2},
        "env": {"FLUKSIO_REHEARSAL": "1"},
    }
).encode()


def _rehearse() -> None:
    """Run a call whose records go nowhere, then undo what it left.

    A process's first writes to pages it shares with the server fault and copy them (the
    interpreter writes reference counts and its specialised bytecode as it runs), and a
    call's path writes hundreds. Made here, before the request, they are off its path.
    """
    import linecache

    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        run_spec(_REHEARSAL, sink)
    finally:
        os.close(sink)
        os.environ.pop("FLUKSIO_REHEARSAL", None)
        sys.modules.pop("fluksio", None)
        sys.modules.pop("fluksio_node", None)
        linecache.cache.pop(source_name("rehearsal"), None)


def _wait_for_call(inbox: socket.socket, rehearse: bool) -> int:
    """The life of a call process: what needs no spec, then the one request it is for."""
    import gc
    import select

    gc.disable()  # a call is short-lived; a collection would only copy pages
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's handler is not its
    os.setpgid(0, 0)
    die_with_parent(os.getppid())
    become_subreaper()
    waiting = select.poll()
    waiting.register(inbox, select.POLLIN)
    if rehearse and not waiting.poll(0):
        _rehearse()  # not when a request waits already: it would only delay it
    _message, header, spec, fds = _recv_request(inbox)
    if header is None:
        return 0  # nobody will send a call: the client or the server ended
    inbox.close()
    if spec is None:
        spec_fd, output_fd, record_fd = fds
        with os.fdopen(spec_fd, "rb") as handle:
            spec = handle.read()
    else:
        output_fd, record_fd = fds
    os.dup2(output_fd, 1)
    os.dup2(output_fd, 2)
    os.dup2(record_fd, RECORD_FD)
    for fd in {output_fd, record_fd} - {1, 2, RECORD_FD}:
        os.close(fd)
    code = run_spec(spec, RECORD_FD)
    end_descendants()
    return code


def _sweep_orphans(calls: set[int]) -> None:
    """Kill every child of this server that is not one of ``calls``: what a call process
    that died left behind, orphaned here (this server is a subreaper)."""
    children = children_of(os.getpid())
    if children is None:
        children = parent_map().get(os.getpid(), [])
    for pid in children:
        if pid not in calls and is_running(pid):
            kill_call(pid)


def _reap(sock: socket.socket, live: set[int], spares: set[int]) -> tuple[bool, bool]:
    """Collect ended children and report the calls and spares among them (adopted orphans
    are only collected); whether a spare ended, and whether a call did."""
    spare_ended = call_ended = False
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        if pid in spares:
            spares.discard(pid)
            spare_ended = True
        elif pid in live:
            live.discard(pid)
            call_ended = True
        else:
            continue  # an orphan a call left, killed by _sweep_orphans
        code = os.waitstatus_to_exitcode(status)
        _send(sock, {"op": "exit", "pid": pid, "status": code})
    return spare_ended, call_ended
