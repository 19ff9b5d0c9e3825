"""``save_artifact`` and ``load_artifact`` for node code: the store on disk, or over HTTP
with a local cache."""

from __future__ import annotations

import hashlib
import json
import os
import time

# Not `from typing import TYPE_CHECKING`: importing typing costs a spawned call
# milliseconds. Type checkers treat this name as true all the same.
TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: nothing here is imported when the runner runs
    import http.client
    import socket
    from collections.abc import Mapping
    from typing import IO, Any

    Source = bytes | bytearray | memoryview | str | os.PathLike[str]


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

    def __init__(self, base: str, token: str, settings: Mapping[str, str] | None = None) -> None:
        import urllib.parse

        self.base = urllib.parse.urlsplit(base.rstrip("/"))
        self.token = token
        self.settings = os.environ if settings is None else settings
        """Where its CA file and route come from: a call's environment (the agent's
        prefetch passes the call's, as the call will have it)."""

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
            ca_file = self.settings.get("FLUKSIO_CA_FILE")
            if ca_file:
                context.load_verify_locations(cafile=ca_file)
            connection = http.client.HTTPSConnection(
                self.base.netloc, timeout=300, blocksize=1 << 20, context=context
            )
        else:
            connection = http.client.HTTPConnection(
                self.base.netloc, timeout=300, blocksize=1 << 20
            )
        _route(connection, self.settings)
        all_headers = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        connection.request(method, self.base.path + path, body=body, headers=all_headers)
        return connection.getresponse()


def _route(connection: http.client.HTTPConnection, settings: Mapping[str, str]) -> None:
    """Send ``connection`` where the agent's ``--connect-to`` says, if it names its host and
    port: the TLS handshake and the Host header still name the URL's host."""
    raw = settings.get("FLUKSIO_CONNECT_TO")
    if not raw:
        return
    route = json.loads(raw)
    if [connection.host, connection.port] != route["for"]:
        return
    import socket

    to = (route["to"][0], int(route["to"][1]))

    def to_route(_address: tuple[str, int], *rest: Any) -> socket.socket:
        return socket.create_connection(to, *rest)

    connection._create_connection = to_route  # type: ignore[attr-defined]


def _http() -> _Http | None:
    base, token = os.environ.get("FLUKSIO_ARTIFACT_URL"), os.environ.get("FLUKSIO_ARTIFACT_TOKEN")
    return _Http(base, token) if base and token else None


def _save_remote(
    http: _Http, source: Source, name: str, media_type: str, *, owned: bool
) -> tuple[str, int]:
    import urllib.parse

    hex_digest, size = _copy_hashing(source, None)
    digest = f"sha256:{hex_digest}"
    if not owned:
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
    return save_owned(source, name, media_type, owned=False)


def save_owned(
    source: bytes | bytearray | memoryview | str | os.PathLike[str],
    name: str = "",
    media_type: str = "application/octet-stream",
    *,
    owned: bool,
) -> dict[str, object]:
    """:func:`save_artifact`; ``owned``: uploaded even when the engine holds the bytes, so
    that it knows them as this call's own (a checkpoint's state must be)."""
    if not name and not isinstance(source, (bytes, bytearray, memoryview)):
        name = os.path.basename(os.fspath(source))
    root = os.environ.get("FLUKSIO_ARTIFACT_DIR")
    http = None if root and not owned else _http()
    if owned and http is not None:
        # Over HTTP even beside a shared store: the engine knows it as this call's own.
        hex_digest, size = _save_remote(http, source, name, media_type, owned=True)
    elif root:
        hex_digest, size = _save_local(root, source)
    elif http is not None:
        hex_digest, size = _save_remote(http, source, name, media_type, owned=owned)
    else:
        raise RuntimeError("no artifact store is available to this call")
    if http is not None and not root:
        # Held here too: the next call that reads it is placed here, and reads it locally.
        _cache_saved(source, hex_digest, size, os.environ)
    return {"digest": f"sha256:{hex_digest}", "size": size, "media_type": media_type, "name": name}


def artifact_cache_dir(settings: Mapping[str, str]) -> str:
    """Where calls with environment ``settings`` cache the artifacts they fetch."""
    import tempfile

    return settings.get("FLUKSIO_ARTIFACT_CACHE") or os.path.join(
        tempfile.gettempdir(), f"fluksio-artifacts-{os.getuid()}"
    )


def _cache_bound(settings: Mapping[str, str]) -> int:
    return int(settings.get("FLUKSIO_ARTIFACT_CACHE_BYTES") or 1 << 30)


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


def _cache_saved(source: Source, hex_digest: str, size: int, settings: Mapping[str, str]) -> None:
    """Put what was just saved into this machine's cache, as if it had been fetched."""
    import shutil

    root, bound = artifact_cache_dir(settings), _cache_bound(settings)
    if size > bound // 2:
        return  # it would push out half the cache, or more: read again when needed
    path = _object_path(root, hex_digest)
    if os.path.exists(path):
        os.utime(path)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.part"
    try:
        if isinstance(source, (bytes, bytearray, memoryview)):
            with open(tmp, "wb") as out:
                out.write(source)
        else:
            shutil.copyfile(os.fspath(source), tmp)
        os.replace(tmp, path)
    except OSError:
        return  # a cache is a help: a full disk here loses nothing the engine holds
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    _evict(root, path, bound)


def _fetch(http: _Http, hex_digest: str, root: str, bound: int) -> str:
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
    return _fetch(http, hex_digest, artifact_cache_dir(os.environ), _cache_bound(os.environ))


def named_digests(value: object) -> list[str]:
    """The artifacts ``value`` (a call's arguments) names by reference, anywhere within
    it: the hex digests of ``{"digest": "sha256:<hex>", ...}`` dicts, in order, once each."""
    found: dict[str, None] = {}
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            digest = item.get("digest")
            if isinstance(digest, str) and digest.startswith("sha256:") and len(digest) == 71:
                found[digest[7:]] = None
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return list(found)


def prefetch_artifacts(hex_digests: list[str], settings: Mapping[str, str]) -> None:
    """Bring the artifacts into this machine's cache as a call with environment
    ``settings`` would fetch them (the agent, for a call that waits for a slot, so that
    it finds its inputs there when it starts). A call that reads the engine's store
    directly, or has no artifact token, fetches nothing."""
    base, token = settings.get("FLUKSIO_ARTIFACT_URL"), settings.get("FLUKSIO_ARTIFACT_TOKEN")
    if settings.get("FLUKSIO_ARTIFACT_DIR") or not (base and token):
        return
    http = _Http(base, token, settings)
    root, bound = artifact_cache_dir(settings), _cache_bound(settings)
    for hex_digest in hex_digests:
        _fetch(http, hex_digest, root, bound)
