"""The engine's records as the wire's answers: a flow, a secret (never its value), and the
worker, personal and scrape tokens (never their text). Built here, beside the engine's
own records, so a route hands an answer out and copies no field."""

from __future__ import annotations

from fluksio.engine.personal_tokens import PersonalTokenRecord
from fluksio.engine.runs.store import FlowRecord
from fluksio.engine.scrape_tokens import ScrapeTokenRecord
from fluksio.engine.secrets import SecretInfo
from fluksio.engine.worker_tokens import WorkerTokenRecord
from fluksio.wire.answers.flows import FlowBody
from fluksio.wire.answers.resources import SecretBody
from fluksio.wire.answers.tokens import PersonalTokenBody, ScrapeTokenBody, WorkerTokenBody
from fluksio.wire.times import utc

__all__ = [
    "flow_body",
    "personal_token_body",
    "scrape_token_body",
    "secret_body",
    "worker_token_body",
    "worker_token_fields",
]


def flow_body(record: FlowRecord) -> FlowBody:
    return FlowBody(
        name=record.name,
        nodes=record.spec["nodes"],
        created_at=utc(record.created_at),
        updated_at=utc(record.updated_at),
        transient=record.transient,
    )


def secret_body(info: SecretInfo) -> SecretBody:
    return SecretBody(
        name=info.name,
        labels=list(info.labels),
        created_at=utc(info.created_at),
        updated_at=utc(info.updated_at),
    )


def scrape_token_body(record: ScrapeTokenRecord) -> ScrapeTokenBody:
    return ScrapeTokenBody(
        id=record.id,
        name=record.name,
        status=record.status,
        created_at=utc(record.created_at),
        created_by=record.created_by,
        revoked_at=utc(record.revoked_at),
    )


def personal_token_body(record: PersonalTokenRecord, now: float) -> PersonalTokenBody:
    return PersonalTokenBody(
        id=record.id,
        name=record.name,
        status=record.status(now),
        created_at=utc(record.created_at),
        expires_at=utc(record.expires_at),
        revoked_at=utc(record.revoked_at),
    )


def worker_token_fields(record: WorkerTokenRecord, now: float) -> dict[str, object]:
    return {
        "jti": record.jti,
        "name": record.name,
        "labels": list(record.labels),
        "status": record.status(now),
        "created_at": utc(record.created_at),
        "created_by": record.created_by,
        "expires_at": utc(record.expires_at),
        "revoked_at": utc(record.revoked_at),
        "revoked_reason": record.revoked_reason,
    }


def worker_token_body(record: WorkerTokenRecord, now: float) -> WorkerTokenBody:
    return WorkerTokenBody.model_validate(worker_token_fields(record, now))
