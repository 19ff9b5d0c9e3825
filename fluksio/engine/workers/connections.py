"""The engine's side of every worker connection: who is let in, and what follows.

``api/attach.py`` frames the socket (reads the hello, reads and counts frames, pings);
everything it decides lives here or in the connection machine
(:mod:`fluksio.engine.workers.connection.machine`): a protocol or labels refused (and the worker
listed as needing an upgrade), a newer connection of the same worker superseding the
older, an away worker coming back to its session, the welcome, and what the rest of the
engine is told when a worker attaches, stops answering, is away, or is gone.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from fluksio.agent.launcher import LIMIT_GRACE_S
from fluksio.agent.protocol.frames import (
    IMAGE_HELD,
    ArtifactRef,
    HelloFrame,
    StoreOffer,
    WelcomeFrame,
    encode,
)
from fluksio.clock import Clock
from fluksio.engine.artifacts import ArtifactStore
from fluksio.engine.call_saves import CallSaves
from fluksio.engine.dispatch.dispatcher import Dispatcher
from fluksio.engine.settings import EngineSettings
from fluksio.engine.tokens import TokenService, WorkerIdentity
from fluksio.engine.workers.connection.holder import Holder, Relation, relation
from fluksio.engine.workers.connection.machine import (
    LIMIT_BACKSTOP_S,
    ConnectionRules,
    unsigned_labels,
)
from fluksio.engine.workers.protocol import CLOSE_SUPERSEDED, containers_of, protocol_refusal
from fluksio.engine.workers.refused import NeedsUpgrade
from fluksio.engine.workers.registry import WorkerRegistry, display_name
from fluksio.engine.workers.session import WorkerSession
from fluksio.engine.workers.socket import CountedSocket
from fluksio.engine.workers.watch import ping_every_s
from fluksio.logs import get_logger
from fluksio.names import is_name
from fluksio.provisioners.base import WorkerRecord
from fluksio.scheduler import Worker

__all__ = ["ConnectionParts", "Refusal", "WorkerConnections"]

log = get_logger(__name__)
ARTIFACT_TOKEN_TTL_S = 24 * 3600
"""How long a call may use its artifact token: as long as a batch job may reasonably run."""


class Refusal(Exception):
    """A worker is not let in: ``reason`` is the sentence its ``refused`` frame carries."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class ConnectionParts:
    """What of the engine its worker connections use, given by the engine that makes them."""

    settings: EngineSettings
    clock: Clock
    workers: WorkerRegistry
    dispatcher: Dispatcher
    tokens: TokenService
    artifacts: ArtifactStore
    saves: CallSaves


@dataclass(frozen=True)
class _WorkerArtifacts:
    """How calls on one worker save artifacts as their own: a token tied to the worker's
    (revoking that revokes it), bound to each call, and what each call saved."""

    tokens: TokenService
    saves: CallSaves
    name: str
    parent_jti: str

    def mint(self) -> str:
        return self.tokens.mint_artifact(
            self.name, parent_jti=self.parent_jti, ttl_s=ARTIFACT_TOKEN_TTL_S
        )

    def for_call(self, base: str, call_id: str) -> str:
        return self.tokens.artifact_for_call(base, call_id)

    def refusal(self, call_id: str, state: ArtifactRef) -> str | None:
        return self.saves.refusal(call_id, state)


class WorkerConnections:
    """Admits workers and is the link every :class:`WorkerSession` reports to."""

    def __init__(self, parts: ConnectionParts) -> None:
        self._parts = parts
        settings = parts.settings
        self.rules = ConnectionRules(
            take_within_s=settings.worker_take_s,
            # A healthy worker answers each ping within moments: one ping left unanswered
            # (with half an interval to spare) means it is frozen or cut off for now.
            answer_within_s=1.5 * ping_every_s(settings),
            gone_after_s=settings.worker_gone_s,
            limit_backstop_s=LIMIT_GRACE_S + LIMIT_BACKSTOP_S,
        )

    def check_protocol(self, token: WorkerIdentity, raw: dict[str, Any]) -> None:
        """Refuse a hello of another protocol, listing its worker as needing an upgrade."""
        protocol = raw.get("protocol")
        reason = protocol_refusal(protocol)
        if reason is None:
            return
        # Kept until the worker attaches or the engine restarts, so only bounded fields
        # are: a name by the name rule (else the token's), short texts, a number.
        hello_name = raw.get("name")
        name = hello_name if isinstance(hello_name, str) and is_name(hello_name) else token.name
        self._parts.workers.refused_for_protocol(
            NeedsUpgrade(
                name=display_name(token.name, name),
                protocol=protocol if type(protocol) is int and 0 <= protocol < 1000 else None,
                version=_text(raw.get("version"), 32),
                python=_text(raw.get("python"), 256),
                refused_at=self._parts.clock.now(),
                reason=reason,
                jti=token.jti,
            )
        )
        raise Refusal(reason)

    async def admit(
        self, token: WorkerIdentity, hello: HelloFrame, ws: CountedSocket
    ) -> tuple[WorkerSession, int]:
        """Let the worker in over ``ws``: its session and which of its sockets ``ws`` is.

        An away worker naming the calls it holds comes back to its session; otherwise a
        new session begins, superseding any of the same worker (token and ``--name``).
        """
        reason = unsigned_labels(hello.labels, token.labels)
        if reason is not None:
            raise Refusal(reason)
        back = Holder.of(token.jti, hello)
        away = self._parts.workers.by_identity((back.token, back.name))
        if (
            away is not None
            and away.machine.phase == "away"
            and hello.resume is not None
            and relation(away.held_as, back) is Relation.SAME
        ):
            await away.come_back(ws, hello)
            self._parts.dispatcher.worker_back(away.held_as)
            log.info(
                "worker.back", worker=away.name, worker_id=away.id, calls=len(hello.resume or ())
            )
            return away, away.machine.socket
        session = self._new_session(token, hello, ws)
        superseded = self._parts.workers.add(session)
        if superseded is not None:
            await superseded.close(
                "superseded by a newer connection of the same worker", code=CLOSE_SUPERSEDED
            )
        dispatcher = self._parts.dispatcher
        # Calls a restarted engine found running on this worker: taken over where it names
        # them (nothing is read from it until they are), ended now where it does not.
        adopting = dispatcher.returning(
            session.name, back, hello.resume, published=hello.version is None
        )
        await session.welcome(hello.resume or [], {call.request.id for call in adopting})
        inventory = hello.inventory
        dispatcher.worker_attached(
            Worker(
                id=session.id,
                name=session.name,
                labels=frozenset(hello.labels),
                slots=hello.max_parallel,
                pipeline=session.pipeline,
                cpus=inventory.cpus,
                gpus=inventory.gpus,
                ram_mb=inventory.ram_mb,
                ends_at=hello.ends_at,
                notice_s=hello.notice_s,
                containers=containers_of(hello.containers),
            ),
            session,
            session.record,
        )
        dispatcher.adopt(adopting, session.id, session)
        # Told by its welcome to drop what it holds that was lost with its connection: the
        # next attempts of those need not wait out its deadline any more.
        dispatcher.worker_back(session.held_as)
        log.info(
            "worker.attached",
            worker=session.name,
            worker_id=session.id,
            labels=hello.labels,
            parallel=hello.max_parallel,
            pipeline=session.pipeline,
            version=hello.version or "0.1.x",
        )
        return session, session.machine.socket

    def _new_session(
        self, token: WorkerIdentity, hello: HelloFrame, ws: CountedSocket
    ) -> WorkerSession:
        worker_id = f"w{secrets.token_hex(6)}"
        name = display_name(token.name, hello.name)
        job = self._job_of(token)
        tokens = self._parts.tokens
        return WorkerSession(
            token=token,
            key_id=tokens.current_key_id(),
            hello=hello,
            ws=ws,
            clock=self._parts.clock,
            rules=self.rules,
            link=self,
            record=_record(worker_id, name, token, hello, job[1] if job else None),
            artifacts=_WorkerArtifacts(tokens, self._parts.saves, name, token.jti),
            batch_job=" ".join(job) if job else None,
        )

    def _job_of(self, token: WorkerIdentity) -> tuple[str, str] | None:
        """The job a provisioned worker's request runs as (its noun and id), if known."""
        provisioned = token.provisioned_by
        if provisioned is None or self._parts.dispatcher.provisioning is None:
            return None
        return self._parts.dispatcher.provisioning.job_of(*provisioned)

    # -- what sessions report (SessionLink) ------------------------------------------------

    def answering(self, session: WorkerSession, answering: bool) -> None:
        self._parts.dispatcher.set_answering(session.id, answering)

    def away(self, session: WorkerSession) -> None:
        log.info("worker.away", worker=session.name, worker_id=session.id)

    def gone(self, session: WorkerSession, reason: str) -> None:
        self._parts.workers.remove(session)
        self._parts.dispatcher.worker_gone(session.record, reason)
        log.info("worker.detached", worker=session.name, worker_id=session.id, reason=reason)

    def stopping(self, session: WorkerSession, why: str) -> None:
        if self._parts.dispatcher.set_stopping(session.id):
            log.info("worker.stopping", worker=session.name, worker_id=session.id, why=why)

    def cached(self, session: WorkerSession, holds: frozenset[str]) -> None:
        """A worker told what it holds: artifacts by digest, images as ``image:<name>``."""
        images = {h for h in holds if h.startswith(IMAGE_HELD)}
        named = frozenset(h.removeprefix(IMAGE_HELD) for h in images)
        session.held_images = sorted(named)
        self._parts.dispatcher.set_cached(session.id, holds - images, named)

    async def written_through(self) -> None:
        await self._parts.dispatcher.written_through()

    def welcome(self, session: WorkerSession, kept: list[str]) -> str:
        store = self._parts.artifacts
        probe, nonce = store.probe()
        # (ours) Where the store is, and a file only a worker sharing this filesystem can
        # read: such a worker's calls use the store directly instead of HTTP. Never assumed.
        shared = StoreOffer(path=str(store.root), probe=probe, nonce=nonce)
        public = self._parts.settings.public_url
        artifacts = f"{public}/api/v1/artifacts" if public is not None else None
        return encode(
            WelcomeFrame(
                name=session.name,
                store=shared,
                artifacts=artifacts,
                logs=True,
                pipeline=session.pipeline,
                cache=True,
                stopping=True,
                gone_s=self._parts.settings.worker_gone_s,
                take_s=self._parts.settings.worker_take_s,
                kept=kept if session.hello.resume is not None else None,
            )
        )


def _text(value: object, limit: int) -> str | None:
    """A hello's text field as kept: a string, cut to ``limit`` characters."""
    if not isinstance(value, str):
        return None
    return value if len(value) <= limit else value[: limit - 3] + "..."


def _record(
    worker_id: str, name: str, token: WorkerIdentity, hello: HelloFrame, job_id: str | None
) -> WorkerRecord:
    """What the provisioning driver and the worker hooks are told of a worker; ``job_id``:
    its request's job, where the worker did not say (only a Slurm job's worker does)."""
    provisioned = token.provisioned_by
    provisioner, profile, request_id = provisioned if provisioned else (None, None, None)
    return WorkerRecord(
        worker_id=worker_id,
        name=name,
        labels=tuple(hello.labels),
        provisioner=provisioner,
        profile=profile,
        request_id=request_id,
        job_id=hello.slurm_job_id or job_id,
        ends_at=hello.ends_at,
    )
