"""Runs one node call in a fresh process. Standard library only; CPython 3.9 or later.

This file is used as it is wherever node code runs: by the engine for its own calls, by
``fluksio-worker`` under its ``--python``, and copied beside ``agent.py`` on a host without
pip (the engine serves it at ``GET /api/v1/workers/runtime``). It imports nothing outside
the standard library and nothing of Fluksio.

A call process has three descriptors, whichever way it was started:

* fd 0: the call's spec, one JSON document (read to EOF);
* fd 1 and 2: the node's output (stdout and stderr share one pipe, captured as its logs);
* fd 3: records, one JSON document per line: ``{"kind": "event", ...}`` for each
  ``emit`` and ``yield``, then exactly one ``{"kind": "result", "ok": ...}``.

The spec: ``{"op": "run" | "compile", "source", "node", "flow", "kwargs", "env"}``. ``env``
(thread caps, ``CUDA_VISIBLE_DEVICES``, where artifacts live) is applied before the node's
code is imported, which is the only moment numerical libraries read it.

Two ways to start a call process:

* ``python runner.py call``: a fresh interpreter per call (the fallback);
* ``python runner.py serve FD``: a **fork server**. It imports only this module and the
  standard library, and forks one child per call, ahead of need: the client sends each
  call to a child that is waiting for it (see :func:`serve`). Forking costs about a
  millisecond where starting an interpreter costs several, and forked ahead it costs the
  call nothing.

The fork server reads no thread-cap or device variable and starts no thread, so a child
that sets them before importing the node's code is indistinguishable from a fresh
interpreter. Every call process gets its own process group, dies with its parent
(``PR_SET_PDEATHSIG``) and is a subreaper, so what it starts stays below it. Nothing a
node started outlives its call: not a grandchild, not a process that left the group with
``setsid``, not a double fork. A call that returns kills what is left below it; a call
that is cancelled or stopped is killed with its whole tree, found through ``/proc``; the
fork server kills what a call process that died anyway left orphaned to it; and the fork
server, or a spawned call, is sent SIGTERM when its parent dies, however that dies, and
then SIGKILLs its whole tree.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time

# Not `from typing import TYPE_CHECKING`: importing typing costs a spawned call
# milliseconds. Type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: nothing here is imported when the runner runs
    import logging
    import socket
    import types
    from collections.abc import Callable, Mapping
    from typing import IO, Any, NoReturn

    Source = bytes | bytearray | memoryview | str | os.PathLike[str]

PROTOCOL = 3
"""Version of the launcher <-> runner conversation (fork requests, records)."""

MAX_MESSAGE_BYTES = 1 << 17
"""Largest fork request; a spec that does not fit comes through a pipe instead."""
REAP_INTERVAL_MS = 200
SPARES = 2
"""Call processes the fork server keeps forked ahead: the next call's, and one for the
call after it while the server forks a replacement."""

SPEC_FD = 0
RECORD_FD = 3

# Names of host variables a node never sees: credentials and the worker's own settings.
_CREDENTIAL_WORDS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "KEY",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "CERT",
    "CONNECTION_STRING",
    "DATABASE_URL",
    "PGPASS",
    "DSN",
)
_CREDENTIAL_PREFIXES = (
    "AWS_",
    "AZURE_",
    "ARM_",
    "GOOGLE_",
    "GCP_",
    "GCLOUD_",
    "CLOUDSDK_",
    "DIGITALOCEAN_",
    "HEROKU_",
    "GITHUB_",
    "GH_",
    "GITLAB_",
    "CI_JOB_",
    "NPM_",
    "PYPI_",
    "TWINE_",
    "DOCKER_",
    "OPENAI_",
    "ANTHROPIC_",
    "HF_",
    "HUGGING_FACE_",
    "VAULT_",
    "KUBECONFIG",
    "OS_",
    "FLUKSIO_",
)
# Set per call by the engine for the reporter; everything else FLUKSIO_* is removed.
_REPORTER_VARIABLES = (
    "FLUKSIO_ARTIFACT_DIR",  # the store itself, where the call runs on the engine
    "FLUKSIO_ARTIFACT_URL",  # the store over HTTP, elsewhere
    "FLUKSIO_ARTIFACT_TOKEN",  # a token that can only move artifacts, minted per call
    "FLUKSIO_ARTIFACT_CACHE",
    "FLUKSIO_ARTIFACT_CACHE_BYTES",
)
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "RAYON_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)


def is_credential_name(name: str) -> bool:
    upper = name.upper()
    if upper in _REPORTER_VARIABLES:
        return False
    return any(word in upper for word in _CREDENTIAL_WORDS) or upper.startswith(
        _CREDENTIAL_PREFIXES
    )


# ``scheme://user:password@`` (or ``scheme://token@``) inside a value: the part a node
# must not see, wherever a URL with credentials stands (a proxy, a broker, a database).
_URL_CREDENTIALS = r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@"


def without_url_credentials(value: str) -> str:
    """``value`` with the user and password taken out of every URL in it."""
    if "://" not in value or "@" not in value:
        return value  # the common case, without importing re (a spawned call pays for it)
    import re

    return re.sub(_URL_CREDENTIALS, r"\1", value)


def filtered_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The host environment a node may see.

    Credential-like variables are removed by name; in what remains, every URL keeps its
    host but loses its credentials (``HTTP_PROXY=http://u:pw@proxy:3128`` is seen as
    ``http://proxy:3128``).
    """
    return {k: without_url_credentials(v) for k, v in environ.items() if not is_credential_name(k)}


# -- the reporter: what `import fluksio` gives node code -----------------------------------


def _encode(record: object) -> bytes:
    return (json.dumps(record, allow_nan=False, default=_refuse) + "\n").encode()


class _Records:
    """Writes records to fd 3; safe from threads the node may start."""

    def __init__(self, fd: int) -> None:
        # _thread, not threading: importing threading in the fork server adds an at-fork
        # handler that costs every child over a hundred page faults.
        import _thread

        self._fd = fd
        self._lock = _thread.allocate_lock()

    def write(self, record: object) -> None:
        self.write_encoded(_encode(record))

    def write_encoded(self, data: bytes) -> None:
        with self._lock:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]


def _refuse(value: object) -> NoReturn:
    raise TypeError(f"object of type {type(value).__name__} is not JSON serializable")


def _object_path(root: str, hex_digest: str) -> str:
    return os.path.join(root, "sha256", hex_digest[:2], hex_digest)


def _hex_of(ref: dict[str, object] | str) -> str:
    digest = str(ref["digest"]) if isinstance(ref, dict) else str(ref)
    algorithm, _, hex_digest = digest.partition(":")
    if (
        algorithm != "sha256"
        or len(hex_digest) != 64
        or not all(c in "0123456789abcdef" for c in hex_digest)
    ):
        raise ValueError(f"not an artifact digest: {digest!r}")
    return hex_digest


def _copy_hashing(source: Source, out: IO[bytes] | None) -> tuple[str, int]:
    """Copy bytes or a file at a path into ``out`` (or nowhere), hashing; (hex, size)."""
    digest = hashlib.sha256()
    size = 0
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        digest.update(data)
        if out is not None:
            out.write(data)
        return digest.hexdigest(), len(data)
    with open(os.fspath(source), "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
            if out is not None:
                out.write(chunk)
    return digest.hexdigest(), size


def _save_local(root: str, source: Source) -> tuple[str, int]:
    folder = os.path.join(root, "tmp")
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f"{os.getpid()}.{time.monotonic_ns()}.part")
    try:
        with open(tmp, "wb") as out:
            hex_digest, size = _copy_hashing(source, out)
            out.flush()
            os.fsync(out.fileno())
        final = _object_path(root, hex_digest)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return hex_digest, size


class _Http:
    """The artifact endpoints beside the attach socket, with the call's artifact token."""

    def __init__(self, base: str, token: str) -> None:
        import urllib.parse

        self.base = urllib.parse.urlsplit(base.rstrip("/"))
        self.token = token

    def request(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> Any:
        import http.client

        # 1 MiB blocks: http.client's default of 8 KiB makes a large upload mostly syscalls.
        connection: http.client.HTTPConnection
        if self.base.scheme == "https":
            import ssl

            # The agent's trust: the system's CAs, and its --ca-file if it has one.
            context = ssl.create_default_context()
            ca_file = os.environ.get("FLUKSIO_CA_FILE")
            if ca_file:
                context.load_verify_locations(cafile=ca_file)
            connection = http.client.HTTPSConnection(
                self.base.netloc, timeout=300, blocksize=1 << 20, context=context
            )
        else:
            connection = http.client.HTTPConnection(
                self.base.netloc, timeout=300, blocksize=1 << 20
            )
        all_headers = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        connection.request(method, self.base.path + path, body=body, headers=all_headers)
        return connection.getresponse()


def _http() -> _Http | None:
    base, token = os.environ.get("FLUKSIO_ARTIFACT_URL"), os.environ.get("FLUKSIO_ARTIFACT_TOKEN")
    return _Http(base, token) if base and token else None


def _save_remote(http: _Http, source: Source, name: str, media_type: str) -> tuple[str, int]:
    import urllib.parse

    hex_digest, size = _copy_hashing(source, None)
    digest = f"sha256:{hex_digest}"
    head = http.request("HEAD", f"/{digest}")
    head.read()
    if head.status == 200:
        return hex_digest, size  # the engine has it: upload once, not again
    query = urllib.parse.urlencode({"name": name, "media_type": media_type})
    if isinstance(source, (bytes, bytearray, memoryview)):
        body: Any = bytes(source)
        answer = http.request(
            "PUT", f"?{query}", body, {"X-Fluksio-Digest": digest, "Content-Length": str(size)}
        )
    else:
        with open(os.fspath(source), "rb") as body:
            answer = http.request(
                "PUT", f"?{query}", body, {"X-Fluksio-Digest": digest, "Content-Length": str(size)}
            )
    payload = answer.read()
    if answer.status != 201:
        raise RuntimeError(f"the engine refused the artifact: {payload[:300]!r}")
    return hex_digest, size


def save_artifact(
    source: bytes | bytearray | memoryview | str | os.PathLike[str],
    name: str = "",
    media_type: str = "application/octet-stream",
    volatile: bool = False,
) -> dict[str, object]:
    """Store bytes (or the file at a path) by content; returns the reference dict."""
    if not name and not isinstance(source, (bytes, bytearray, memoryview)):
        name = os.path.basename(os.fspath(source))
    root = os.environ.get("FLUKSIO_ARTIFACT_DIR")
    http = None if root else _http()
    if root:
        hex_digest, size = _save_local(root, source)
    elif http is not None:
        hex_digest, size = _save_remote(http, source, name, media_type)
    else:
        raise RuntimeError("no artifact store is available to this call")
    return {"digest": f"sha256:{hex_digest}", "size": size, "media_type": media_type, "name": name}


def _cache_dir() -> str:
    import tempfile

    return os.environ.get("FLUKSIO_ARTIFACT_CACHE") or os.path.join(
        tempfile.gettempdir(), f"fluksio-artifacts-{os.getuid()}"
    )


def _matches(path: str, hex_digest: str) -> bool:
    try:
        return _copy_hashing(path, None)[0] == hex_digest
    except OSError:
        return False


def _evict(root: str, keep: str, bound: int) -> None:
    """Remove the least recently used entries until the cache holds at most ``bound``."""
    entries = []
    for folder, _dirs, files in os.walk(os.path.join(root, "sha256")):
        for file in files:
            path = os.path.join(folder, file)
            try:
                info = os.stat(path)
            except FileNotFoundError:
                continue
            entries.append((info.st_mtime, info.st_size, path))
    total = sum(size for _when, size, _path in entries)
    for _when, size, path in sorted(entries):
        if total <= bound:
            return
        if path != keep:
            if os.path.exists(path):
                os.unlink(path)
            total -= size


def _receive_hashing(answer: Any, out: IO[bytes]) -> str:
    """Copy a response body to ``out`` while another thread hashes it; the hex digest.

    hashlib releases the GIL on large updates, so on two cores hashing overlaps the
    network and the disk instead of following them.
    """
    import queue
    import threading

    digest = hashlib.sha256()
    chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=8)

    def hash_chunks() -> None:
        while (chunk := chunks.get()) is not None:
            digest.update(chunk)

    hasher = threading.Thread(target=hash_chunks, daemon=True)
    hasher.start()
    try:
        for chunk in iter(lambda: answer.read(1 << 20), b""):
            chunks.put(chunk)
            out.write(chunk)
    finally:
        chunks.put(None)
        hasher.join()
    return digest.hexdigest()


def _fetch(http: _Http, hex_digest: str, root: str) -> str:
    """The cached path of ``hex_digest``, fetched once (across processes) and verified."""
    import fcntl

    path = _object_path(root, hex_digest)
    if os.path.exists(path) and _matches(path, hex_digest):
        os.utime(path)  # most recently used
        return path
    os.makedirs(os.path.join(root, "locks"), exist_ok=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(os.path.join(root, "locks", hex_digest), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another call fetching the same digest waits here
        if os.path.exists(path) and _matches(path, hex_digest):
            os.utime(path)
            return path
        answer = http.request("GET", f"/sha256:{hex_digest}")
        if answer.status != 200:
            detail = answer.read()[:300]
            raise FileNotFoundError(f"the engine has no artifact sha256:{hex_digest}: {detail!r}")
        tmp = f"{path}.{os.getpid()}.part"
        try:
            with open(tmp, "wb") as out:
                actual = _receive_hashing(answer, out)
            if actual != hex_digest:
                raise OSError(f"the download of sha256:{hex_digest} did not match its digest")
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    bound = int(os.environ.get("FLUKSIO_ARTIFACT_CACHE_BYTES") or 1 << 30)
    _evict(root, path, bound)
    return path


def load_artifact(ref: dict[str, object] | str) -> str:
    """A local path holding the artifact's bytes (``ref`` is a reference or a digest)."""
    hex_digest = _hex_of(ref)
    root = os.environ.get("FLUKSIO_ARTIFACT_DIR")
    if root:
        path = _object_path(root, hex_digest)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no artifact sha256:{hex_digest} in the store")
        return path
    http = _http()
    if http is None:
        raise RuntimeError("no artifact store is available to this call")
    return _fetch(http, hex_digest, _cache_dir())


def _node_logger() -> logging.Logger:
    import logging

    logger = logging.getLogger("fluksio.node")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    return logger


def _reporter_module(records: _Records) -> types.ModuleType:
    import types

    module = types.ModuleType("fluksio", "The node reporter, installed by the Fluksio runner.")

    def emit(**outputs: object) -> None:
        records.write({"kind": "event", "event": "emit", "outputs": outputs, "ts": time.time()})

    def __getattr__(name: str) -> object:
        # logging costs milliseconds to import: only nodes that use the logger pay it.
        if name == "logger":
            logger = _node_logger()
            module.__dict__["logger"] = logger
            return logger
        raise AttributeError(f"module 'fluksio' has no attribute {name!r}")

    module.__dict__.update(
        emit=emit,
        save_artifact=save_artifact,
        load_artifact=load_artifact,
        __getattr__=__getattr__,
        __all__=["emit", "load_artifact", "logger", "save_artifact"],
    )
    return module


# -- running one call --------------------------------------------------------------------


_prctl: Any = None


def _load_prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once (the fork server does it before any fork)."""
    global _prctl  # noqa: PLW0603 - looked up once per process, by design
    if _prctl is None:
        try:
            import ctypes

            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _prctl = False
    return _prctl or None


def _die_with_parent(parent_pid: int, death_signal: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``death_signal`` when this process's parent dies; no-op elsewhere."""
    prctl = _load_prctl()
    if not prctl:
        return
    pr_set_pdeathsig = 1
    prctl(pr_set_pdeathsig, death_signal, 0, 0, 0)
    if parent_pid and os.getppid() != parent_pid:
        os._exit(1)  # the parent died before the request took effect


def _become_subreaper() -> None:
    """Adopt this process's orphaned descendants (Linux), instead of letting init have them.

    A node's grandchild whose parent exits, or that left the call's process group with
    ``setsid``, stays in this process's tree, where :func:`_kill_below` finds it. Not
    inherited across ``fork``: each call process asks for itself.
    """
    prctl = _load_prctl()
    if prctl:
        pr_set_child_subreaper = 36
        prctl(pr_set_child_subreaper, 1, 0, 0, 0)


def _children(pid: int) -> list[int] | None:
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


def _parent_map() -> dict[int, list[int]]:
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
        below = _children(pid) if scanned is None else None
        if below is None:
            if scanned is None:
                scanned = _parent_map()
            below = scanned.get(pid, [])
        found.extend(below)
        pending.extend(below)
    return found


def _running(pid: int) -> bool:
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
        below = [pid for pid in _descendants(root) if _running(pid)]
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


def _end_descendants() -> None:
    """At the end of a call, in its process: nothing it started outlives it."""
    children = _children(os.getpid())
    if children == []:
        return  # the usual case: one small read, nothing to do
    _kill_below(os.getpid())


def _kill_tree(root: int) -> None:
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


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _kill_tree_and_exit(signum: int, _frame: object) -> None:
    _kill_tree(os.getpid())
    os._exit(128 + signum)


def _pick_function(module: types.ModuleType, node: str) -> Callable[..., object]:
    import types

    candidate: Any = getattr(module, "process", None)
    if callable(candidate):
        return candidate  # type: ignore[no-any-return]
    public = [
        value
        for name, value in vars(module).items()
        if not name.startswith("_")
        and isinstance(value, types.FunctionType)
        and value.__module__ == module.__name__
    ]
    if len(public) == 1:
        return public[0]
    if not public:
        raise LookupError(f"node {node!r} defines no process() and no public function")
    names = ", ".join(sorted(f.__name__ for f in public))
    raise LookupError(f"node {node!r} has no process() and several public functions: {names}")


def _load(spec: dict[str, Any]) -> Callable[..., object]:
    import linecache
    import types

    node = spec.get("node", "node")
    filename = f"<node {spec.get('flow', '')}/{node}>"
    source = spec["source"]
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")
    module = types.ModuleType("fluksio_node")
    module.__file__ = filename
    sys.modules["fluksio_node"] = module
    exec(code, module.__dict__)  # running node code is this module's job
    return _pick_function(module, node)


def _error(exc: BaseException) -> dict[str, str]:
    import traceback

    here = os.path.abspath(__file__)
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if os.path.abspath(frame.filename) != here
    ]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(exc), exc)
    message = str(exc)
    short = f"{type(exc).__name__}: {message}".splitlines()[0] if message else type(exc).__name__
    return {
        "type": type(exc).__name__,
        "message": message,
        "short": short[:300],
        "traceback": "".join(lines),
    }


def _call(function: Callable[..., object], kwargs: dict[str, Any], records: _Records) -> object:
    import types

    result = function(**_accepted(function, kwargs))
    if isinstance(result, types.GeneratorType):
        last = None
        while True:
            try:
                last = next(result)
            except StopIteration as stop:
                return stop.value if stop.value is not None else last
            records.write({"kind": "event", "event": "yield", "outputs": last, "ts": time.time()})
    return result


def _accepted(function: Callable[..., object], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``function`` takes by keyword, read off its code object.

    The engine selects them from the source already, unless its Python cannot parse that
    source (a worker's may be newer): then it sends every name it could, and this picks.
    """
    code = getattr(function, "__code__", None)
    var_keyword = 0x08  # CO_VARKEYWORDS: it takes **kwargs
    if code is None or code.co_flags & var_keyword:
        return kwargs
    first = getattr(code, "co_posonlyargcount", 0)
    names = code.co_varnames[first : code.co_argcount + code.co_kwonlyargcount]
    return {name: value for name, value in kwargs.items() if name in names}


def _drop_credentials() -> None:
    for name in list(os.environ):
        if is_credential_name(name):
            del os.environ[name]
        else:
            value = os.environ[name]
            cleaned = without_url_credentials(value)
            if cleaned != value:
                os.environ[name] = cleaned


def run_child(
    parent_pid: int = 0,
    record_fd: int = RECORD_FD,
    spec_bytes: bytes | None = None,
    death_signal: int = signal.SIGKILL,
) -> int:
    """The body of a call process: read the spec, run, write exactly one result record.

    The environment has been filtered already (by ``main`` for a spawned call, once by
    the fork server for its children); here only the call's own variables are added.
    """
    _die_with_parent(parent_pid, death_signal)
    if spec_bytes is None:
        with os.fdopen(SPEC_FD, "rb", closefd=False) as handle:
            spec_bytes = handle.read()
    return _run_spec(spec_bytes, record_fd)


def _run_spec(spec_bytes: bytes, record_fd: int) -> int:
    os.set_inheritable(record_fd, False)  # the node's own subprocesses never get it
    records = _Records(record_fd)
    spec = json.loads(spec_bytes)
    os.environ.update({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
    sys.modules["fluksio"] = _reporter_module(records)
    try:
        function = _load(spec)
        if spec.get("op") == "compile":
            outcome = {"kind": "result", "ok": True, "result": {"function": function.__name__}}
        else:
            value = _call(function, spec.get("kwargs") or {}, records)
            outcome = {"kind": "result", "ok": True, "result": value}
    except BaseException as exc:  # everything the node raises is its result
        outcome = {"kind": "result", "ok": False, "error": _error(exc)}
    try:
        payload = _encode(outcome)
    except (TypeError, ValueError) as exc:
        refused = type(exc)(f"the node's result is not JSON: {exc}")
        payload = _encode({"kind": "result", "ok": False, "error": _error(refused)})
    sys.stdout.flush()
    sys.stderr.flush()
    records.write_encoded(payload)
    return 0


# -- the fork server ---------------------------------------------------------------------


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
    kill after a grace. Each child's exit is reported as ``{"op": "exit", "pid",
    "status"}`` (``status`` is the exit code, or minus the signal number), a spare's too.
    On EOF every call's tree is killed and the server exits: a client that dies takes its
    calls with it.

    **No process outlives its call.** Each call process is a subreaper, so whatever it
    starts stays below it however it forks (``setsid``, a double fork). A call that
    returns kills what is left below it before it exits (:func:`_end_descendants`); one
    that is killed takes its tree along (:func:`kill_call`); and what escapes a call
    process that died anyway (SIGTERM, out of memory) is orphaned to this server, a
    subreaper too, which kills every child of its own that is no call when a call ends.
    """
    # What every call needs, imported once here rather than in each child. None of these
    # reads a thread-cap or device variable or starts a thread; threading is left out on
    # purpose (see _Records).
    import gc
    import linecache  # noqa: F401
    import select
    import socket
    import types  # noqa: F401

    # Its client dying (even by SIGKILL) ends it through the finally below, which kills
    # every call's whole tree: SIGTERM, not SIGKILL, so that the finally runs.
    _die_with_parent(parent_pid, signal.SIGTERM)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    _become_subreaper()
    _drop_credentials()
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
                elif header["op"] == "kill" and header["pid"] in live:
                    kill_call(header["pid"])
                elif header["op"] == "term" and header["pid"] in live:
                    signal_tree(header["pid"], signal.SIGTERM)
            spare_ended, call_ended = _reap(sock, live, spares)
            if call_ended:
                _sweep_orphans(live | spares)
            if spare_ended:
                _offer_spare(sock, spares, live)  # a spare was killed before it was taken
    finally:
        # The client's death may deliver SIGTERM now (PDEATHSIG) while its EOF already
        # brought us here: nothing may cut the cleanup short and orphan a setsid'd process.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for pid in live | spares:
            kill_call(pid)
        _kill_tree(os.getpid())  # what a call that ended earlier left is orphaned here


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
        _run_spec(_REHEARSAL, sink)
    finally:
        os.close(sink)
        os.environ.pop("FLUKSIO_REHEARSAL", None)
        sys.modules.pop("fluksio", None)
        sys.modules.pop("fluksio_node", None)
        linecache.cache.pop("<node /rehearsal>", None)


def _wait_for_call(inbox: socket.socket, rehearse: bool) -> int:
    """The life of a call process: what needs no spec, then the one request it is for."""
    import gc
    import select

    gc.disable()  # a call is short-lived; a collection would only copy pages
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's handler is not its
    os.setpgid(0, 0)
    _die_with_parent(os.getppid())
    _become_subreaper()
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
    code = _run_spec(spec, RECORD_FD)
    _end_descendants()
    return code


def _sweep_orphans(calls: set[int]) -> None:
    """Kill every child of this server that is not one of ``calls``: what a call process
    that died left behind, orphaned here (this server is a subreaper)."""
    children = _children(os.getpid())
    if children is None:
        children = _parent_map().get(os.getpid(), [])
    for pid in children:
        if pid not in calls and _running(pid):
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


def main(argv: list[str]) -> int:
    # This file's directory must not shadow the node's imports (it holds agent modules).
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if len(argv) >= 2 and argv[1] == "call":
        _drop_credentials()
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        parent_pid = int(argv[2]) if len(argv) > 2 else 0
        # When the agent or engine dies, take the whole tree below this call along.
        _become_subreaper()
        signal.signal(signal.SIGTERM, _kill_tree_and_exit)
        code = run_child(
            parent_pid,
            int(argv[3]) if len(argv) > 3 else RECORD_FD,
            death_signal=signal.SIGTERM,
        )
        _end_descendants()
        os._exit(code)  # the result is written; do not wait for threads the node left
    if len(argv) >= 3 and argv[1] == "serve":
        serve(int(argv[2]), parent_pid=int(argv[3]) if len(argv) > 3 else 0)
        return 0
    sys.stderr.write("usage: runner.py call [PARENT_PID] | serve CONTROL_FD [PARENT_PID]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
