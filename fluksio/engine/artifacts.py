"""The content-addressed store: ``DATA_DIR/artifacts/sha256/<first 2 hex>/<hex>``.

An object is written under a temporary name, hashed as it arrives, fsynced, and renamed
into place only when its digest is known (and matches the one claimed, if any): a reader
never sees a partial object, two uploads of the same content race harmlessly (the rename
is atomic and the bytes are the same), and an upload that fails leaves nothing behind.
This is the same layout the runner writes when a node runs on the engine itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from fluksio.errors import FluksioError

__all__ = [
    "ArtifactError",
    "ArtifactStore",
    "ArtifactTooLarge",
    "StoreFull",
    "StoredObject",
    "parse_digest",
]

_DIGEST = re.compile(r"^sha256:([0-9a-f]{64})$")


class ArtifactError(FluksioError):
    """An upload or a digest the store refuses; nothing was stored. ``field`` names what."""

    def __init__(self, detail: str, field: str = "body") -> None:
        super().__init__(detail)
        self.field = field


class ArtifactTooLarge(ArtifactError):
    """Larger than the operator's limit, declared or as it arrived; nothing was stored."""


class StoreFull(ArtifactError):
    """The disk under the store has no room left; nothing was stored."""


_NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT})


@dataclass(frozen=True)
class StoredObject:
    digest: str
    size: int
    path: Path


def parse_digest(text: str) -> str:
    """The hex of ``sha256:<64 hex>``, or :class:`ArtifactError`."""
    match = _DIGEST.match(text)
    if match is None:
        raise ArtifactError(
            f"{text[:80]!r} is not an artifact digest (sha256:<64 hex digits>)", "digest"
        )
    return match.group(1)


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._probe: tuple[str, str] | None = None
        (root / "sha256").mkdir(parents=True, exist_ok=True, mode=0o700)
        (root / "tmp").mkdir(parents=True, exist_ok=True, mode=0o700)
        for leftover in (root / "tmp").iterdir():
            leftover.unlink(missing_ok=True)  # uploads a killed engine never finished

    def probe(self) -> tuple[str, str]:
        """A probe file a worker on the same filesystem can prove it sees: (its path under
        the store, the nonce it holds).

        One per engine process, written on first use, for every worker: a file written at
        each attach and removed at each detach was the largest item in a profile of
        workers attaching. Its nonce is no secret; it only shows that a worker reads the
        file this engine wrote. Those of earlier engine processes are removed.
        """
        if self._probe is None:
            folder = self.root / "probes"
            folder.mkdir(exist_ok=True, mode=0o700)
            for earlier in folder.iterdir():
                earlier.unlink(missing_ok=True)
            name, nonce = f"engine-{secrets.token_hex(8)}", secrets.token_hex(16)
            (folder / name).write_text(nonce)
            self._probe = (f"probes/{name}", nonce)
        return self._probe

    def refresh(self, found: StoredObject) -> None:
        """Mark an object as just stored: a call that found the engine has its bytes (and
        so uploads nothing) is about to name it, and the sweep spares what is newer than
        every call in flight."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(found.path)

    def remove_unreferenced(self, referenced: set[str], older_than: float) -> int:
        """Remove every object whose digest (hex) is not in ``referenced`` and that was
        stored before ``older_than`` (a Unix time); how many. Blocking: run it off the
        event loop."""
        removed = 0
        for folder in (self.root / "sha256").iterdir():
            for entry in folder.iterdir():
                if entry.name in referenced:
                    continue
                try:
                    if entry.stat().st_mtime < older_than:
                        entry.unlink()
                        removed += 1
                except FileNotFoundError:
                    continue  # removed meanwhile
        return removed

    def path_of(self, digest: str) -> Path:
        hex_digest = parse_digest(digest)
        return self.root / "sha256" / hex_digest[:2] / hex_digest

    def find(self, digest: str) -> StoredObject | None:
        path = self.path_of(digest)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return None
        return StoredObject(digest, size, path)

    async def put(
        self,
        chunks: AsyncIterator[bytes],
        *,
        expected: str | None = None,
        max_bytes: int,
        declared_size: int | None = None,
    ) -> StoredObject:
        """Store what ``chunks`` yields; refuse a digest or size that does not match.

        A ``declared_size`` over ``max_bytes`` is refused before anything is read; a disk
        that fills up is :class:`StoreFull`. Either way nothing partial is left.
        """
        expected_hex = parse_digest(expected) if expected is not None else None
        if declared_size is not None and declared_size > max_bytes:
            raise ArtifactTooLarge(
                f"the artifact ({declared_size} bytes) exceeds the limit of {max_bytes} bytes;"
                " nothing was read"
            )
        tmp = self.root / "tmp" / f"{secrets.token_hex(8)}.part"
        digest = hashlib.sha256()
        size = 0
        try:
            with open(tmp, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > max_bytes:
                        raise ArtifactTooLarge(
                            f"the artifact exceeds the limit of {max_bytes} bytes"
                        )
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                # fsync of a large object can take a while: not on the event loop.
                await asyncio.get_running_loop().run_in_executor(None, os.fsync, out.fileno())
            if declared_size is not None and size != declared_size:
                raise ArtifactError(
                    f"the upload ended after {size} of {declared_size} bytes; nothing was stored"
                )
            actual = digest.hexdigest()
            if expected_hex is not None and actual != expected_hex:
                raise ArtifactError(
                    f"the bytes hash to sha256:{actual}, not the claimed {expected};"
                    " nothing was stored",
                    "X-Fluksio-Digest",
                )
            final = self.root / "sha256" / actual[:2] / actual
            final.parent.mkdir(exist_ok=True, mode=0o700)
            os.replace(tmp, final)
            return StoredObject(f"sha256:{actual}", size, final)
        except OSError as exc:
            if exc.errno in _NO_ROOM:
                raise StoreFull(
                    f"the engine's disk has no room for the artifact ({exc.strerror});"
                    " nothing was stored"
                ) from None
            raise
        finally:
            tmp.unlink(missing_ok=True)
