"""What a worker, a call or a superuser asks of the artifact store over HTTP.

A part of :class:`~fluksio.engine.front.engine.Engine`: bytes stored under their digest (bounded
by the engine's ``max_artifact_bytes``, a store without room refused whole), an artifact
found to be read back, and the bytes moved each way counted on the engine's stream like
every other metric. A refusal is a :class:`~fluksio.errors.FluksioError` naming the field.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from fluksio.engine.artifacts import ArtifactError, ArtifactTooLarge, StoredObject, StoreFull
from fluksio.engine.stream import ArtifactBytes
from fluksio.errors import InvalidInput, NotFound, StorageFull, TooLarge
from fluksio.logs import get_logger

if TYPE_CHECKING:
    from fluksio.engine.artifacts import ArtifactStore
    from fluksio.engine.call_saves import CallSaves
    from fluksio.engine.dispatch.dispatcher import Dispatcher
    from fluksio.engine.settings import EngineSettings
    from fluksio.engine.stream import EngineStream

__all__ = ["ArtifactsAsked"]

log = get_logger("fluksio.engine.artifacts")


class ArtifactsAsked:
    def __init__(
        self,
        *,
        settings: EngineSettings,
        stream: EngineStream,
        artifacts: ArtifactStore,
        call_saves: CallSaves,
        dispatcher: Dispatcher,
    ) -> None:
        self.settings = settings
        self.stream = stream
        self._artifacts = artifacts
        self._call_saves = call_saves
        self._dispatcher = dispatcher

    async def put_artifact(
        self,
        chunks: AsyncIterator[bytes],
        *,
        expected: str | None,
        declared_size: int | None,
        by: str,
        call_id: str | None = None,
    ) -> StoredObject:
        """Store what ``chunks`` yields (``expected``: the digest it must have); ``by`` who
        sent it, for the log; ``call_id`` the call whose own credential sent it (its
        checkpoint may name it)."""
        try:
            stored = await self._artifacts.put(
                chunks,
                expected=expected,
                max_bytes=self.settings.max_artifact_bytes,
                declared_size=declared_size,
            )
        except ArtifactTooLarge as error:
            raise TooLarge(error.field, error.detail) from None
        except StoreFull as error:
            log.error("artifact.no_room", error=error.detail, by=by)
            raise StorageFull(error.detail) from None
        except ArtifactError as error:
            raise InvalidInput(error.field, error.detail) from None
        if call_id is not None:
            self._call_saves.add(call_id, stored.digest, stored.size)
            self._dispatcher.saved_by(call_id, stored.digest)
        log.info("artifact.stored", digest=stored.digest, size=stored.size, by=by)
        self.stream.emit(ArtifactBytes("in", stored.size))
        return stored

    def artifact(self, digest: str, *, saving: bool = False) -> Path:
        """Where the bytes of ``digest`` are; :class:`NotFound` when the engine has none.

        ``saving``: a call about to name it asks (and then uploads nothing), so it is
        marked as just stored, and the sweep spares it."""
        try:
            found = self._artifacts.find(digest)
        except ArtifactError as error:
            raise InvalidInput(error.field, error.detail) from None
        if found is None:
            raise NotFound(f"no artifact {digest}")
        if saving:
            self._artifacts.refresh(found)
        return found.path

    def artifact_sent(self, size: int) -> None:
        """``size`` more bytes of an artifact went out."""
        self.stream.emit(ArtifactBytes("out", size))
