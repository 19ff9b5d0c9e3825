"""Access tokens and worker tokens: signing, and the one verifier every endpoint uses.

Both are JWTs signed with the engine's Ed25519 key (``EdDSA``). Claims:

==========  ==========================================  ======================
claim       access token                                worker token
==========  ==========================================  ======================
``sub``     the username                                the worker's name
``type``    ``"access"``                                ``"worker"``
``labels``  (absent)                                    the signed labels
``jti``     random id                                   random id, kept in the database
``iat``     issued at (seconds since the epoch)         issued at
``exp``     expiry (24 h by default)                    expiry (365 days by default)
==========  ==========================================  ======================

A token whose ``iat`` or ``nbf`` lies more than :data:`CLOCK_SKEW_S` ahead of the engine's
clock is refused (RFC 8725, section 3.10: a token from the future is no token to trust).

Verification is pinned to EdDSA (so ``alg: none`` and an HMAC keyed with the public key
are both refused), requires every claim it relies on, and checks the type so that one
kind of token is never accepted as the other.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from fluksio.clock import SYSTEM_CLOCK, Clock
from fluksio.engine import call_tokens
from fluksio.engine.keys import KeyRing, SigningKey
from fluksio.engine.personal_tokens import PREFIX as PERSONAL_PREFIX
from fluksio.engine.personal_tokens import PersonalTokenStore
from fluksio.engine.settings import ACCESS_TOKEN_TTL_S
from fluksio.engine.users import User, UserStore
from fluksio.engine.worker_tokens import WorkerTokenRecord, WorkerTokenStore
from fluksio.errors import NotAuthenticated

__all__ = [
    "ACCESS_TOKEN_TTL_S",
    "CLOCK_SKEW_S",
    "WORKER_TOKEN_TTL_S",
    "MintedWorkerToken",
    "TokenService",
    "WorkerIdentity",
]

ALGORITHM = "EdDSA"
CLOCK_SKEW_S = 60.0
"""How far ahead of the engine's clock a token's ``iat`` or ``nbf`` may lie: a minted
token's clock and the engine's are one, so this allows only for a reset or a replica."""
WORKER_TOKEN_TTL_S = 365 * 24 * 3600
# A real token is well under 1 KB; anything this long is not worth parsing.
_MAX_TOKEN_CHARS = 4096
_VERIFIED_KEPT = 4096
"""Tokens whose signature was checked, kept with their claims: the screen, a script or
a worker presents the same token again and again, and Ed25519 with pyjwt's parsing is
most of what a request costs. Only tokens that verified are kept, so at most this many
of them, and never past their expiry."""
_MINT_NEW = "mint a new one with POST /api/v1/workers/tokens"


@dataclass(frozen=True)
class WorkerIdentity:
    """What a verified worker token proves."""

    name: str
    labels: tuple[str, ...]
    jti: str
    expires_at: float
    provisioned_by: tuple[str, str, str] | None = None
    """(provisioner, profile, request id) when a provisioner's request minted the token."""


@dataclass(frozen=True)
class MintedWorkerToken:
    token: str
    record: WorkerTokenRecord


class TokenService:
    def __init__(
        self,
        keys: KeyRing,
        users: UserStore,
        worker_tokens: WorkerTokenStore,
        *,
        personal_tokens: PersonalTokenStore | None = None,
        access_ttl_s: float = ACCESS_TOKEN_TTL_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._keys = keys
        self._clock = clock
        self._users = users
        self._worker_tokens = worker_tokens
        self._personal_tokens = personal_tokens
        self._access_ttl_s = access_ttl_s
        self._verified: dict[tuple[str, str], dict[str, Any]] = {}

    # -- minting -----------------------------------------------------------------------

    def mint_access(self, user: User) -> str:
        now = int(self._clock.now())
        return self._sign(
            {
                "sub": user.username,
                "type": "access",
                "jti": secrets.token_hex(16),
                "iat": now,
                "exp": now + int(self._access_ttl_s),
            }
        )

    def mint_worker(
        self,
        name: str,
        labels: tuple[str, ...],
        *,
        created_by: str | None,
        ttl_s: float = WORKER_TOKEN_TTL_S,
        provisioned_by: tuple[str, str, str] | None = None,
    ) -> MintedWorkerToken:
        now = int(self._clock.now())
        record = WorkerTokenRecord(
            jti=secrets.token_hex(16),
            name=name,
            labels=labels,
            created_at=now,
            expires_at=now + int(ttl_s),
            created_by=created_by,
            revoked_at=None,
            revoked_reason=None,
        )
        claims: dict[str, Any] = {
            "sub": name,
            "type": "worker",
            "labels": list(labels),
            "jti": record.jti,
            "iat": now,
            "exp": int(record.expires_at),
        }
        if provisioned_by is not None:
            # Ties the worker to the request (and so the job) that brought it.
            provisioner, profile, request_id = provisioned_by
            claims["prov"] = {"provisioner": provisioner, "profile": profile, "request": request_id}
        token = self._sign(claims)
        self._worker_tokens.add(record)
        return MintedWorkerToken(token=token, record=record)

    def mint_artifact(self, subject: str, *, parent_jti: str | None, ttl_s: float) -> str:
        """A token that can only move artifacts, for node code (never the worker token).

        ``parent_jti`` ties it to the worker token of the place the call runs on: revoking
        that token revokes this one too.
        """
        now = int(self._clock.now())
        claims: dict[str, Any] = {
            "sub": subject,
            "type": "artifact",
            "jti": secrets.token_hex(16),
            "iat": now,
            "exp": now + int(ttl_s),
        }
        if parent_jti is not None:
            claims["parent"] = parent_jti
        return self._sign(claims)

    def artifact_for_call(self, base: str, call_id: str) -> str:
        """``base`` (from :meth:`mint_artifact`) as call ``call_id``'s own credential: what
        it uploads is known as that call's (:mod:`~fluksio.engine.call_tokens`)."""
        return call_tokens.bind(base, call_id, self._keys.current())

    def verify_artifact_access(self, token: str) -> tuple[str, str | None]:
        """Who may move artifacts with ``token`` (a worker, an artifact token's subject, or
        a user), and the call it is bound to, if any; :class:`NotAuthenticated` otherwise."""
        kind = _unverified_type(token)
        if kind == "worker":
            return f"worker {self.verify_worker(token).name}", None
        if kind == "access":
            return f"user {self.verify_access(token).username}", None
        unbound = call_tokens.unbind(token, self._keys.current())
        if unbound is None:
            raise NotAuthenticated("the bearer token is not a valid Fluksio token")
        base, call_id = unbound
        claims = self._decode(base, expected_type="artifact")
        parent = claims.get("parent")
        if parent is not None:
            record = self._worker_tokens.get(str(parent))
            if record is None or record.revoked_at is not None:
                raise NotAuthenticated("the worker token this artifact token came from was revoked")
        return f"call for {claims['sub']}", call_id

    def _sign(self, claims: Mapping[str, Any]) -> str:
        key = self._keys.current()
        return jwt.encode(dict(claims), key.private, algorithm=ALGORITHM, headers={"kid": key.kid})

    def current_key_id(self) -> str:
        return self._keys.current().kid

    # -- verifying ---------------------------------------------------------------------

    def verify_access(self, token: str) -> User:
        """The user an access token (a login's, or a personal token) speaks for, or
        :class:`NotAuthenticated`."""
        kind = "access token"
        if token.startswith(PERSONAL_PREFIX) and self._personal_tokens is not None:
            username = self._personal_tokens.username_of(token)
            kind = "personal token"
        else:
            username = str(self._decode(token, expected_type="access")["sub"])
        user = self._users.get(username)
        if user is None:
            raise NotAuthenticated(f"the user this {kind} was issued to no longer exists")
        return user

    def verify_worker(self, token: str) -> WorkerIdentity:
        """The worker a token speaks for, or :class:`NotAuthenticated` saying why not.

        Checks signature, algorithm, expiry, type, a signed ``jti`` and ``labels``, and
        that the engine minted the ``jti`` and has not revoked it.
        """
        claims = self._decode(token, expected_type="worker")
        jti, labels = claims.get("jti"), claims.get("labels")
        if not isinstance(jti, str) or not jti:
            raise NotAuthenticated(f"this worker token has no signed jti; {_MINT_NEW}")
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise NotAuthenticated(f"this worker token has no signed labels; {_MINT_NEW}")
        record = self._worker_tokens.get(jti)
        if record is None:
            raise NotAuthenticated(f"this worker token is unknown to this engine; {_MINT_NEW}")
        if record.revoked_at is not None:
            raise NotAuthenticated(
                f"worker token {record.name!r} (jti {jti}) was revoked"
                f" ({record.revoked_reason}); {_MINT_NEW}"
            )
        provisioned = claims.get("prov")
        provisioned_by = None
        if isinstance(provisioned, dict):
            parts = (provisioned.get(k) for k in ("provisioner", "profile", "request"))
            provisioner, profile, request_id = (str(part) for part in parts)
            provisioned_by = (provisioner, profile, request_id)
        return WorkerIdentity(
            name=str(claims["sub"]),
            labels=tuple(labels),
            jti=jti,
            expires_at=record.expires_at,
            provisioned_by=provisioned_by,
        )

    def verified_before(self, token: str) -> bool:
        """Whether ``token`` was verified with the current key already (a session in use):
        a throttled address's known-good tokens are not held up with the guesses."""
        return (self._keys.current().kid, token) in self._verified

    def _verified_claims(self, token: str, key: SigningKey) -> dict[str, Any]:
        """The claims of ``token`` once its signature, algorithm and claims check out;
        what pyjwt raises otherwise. A token checked before with the same key is not
        checked again, but its expiry is."""
        kept = self._verified.get((key.kid, token))
        if kept is not None:
            if kept["exp"] <= self._clock.now():
                del self._verified[(key.kid, token)]
                raise jwt.ExpiredSignatureError("Signature has expired")
            return dict(kept)
        claims: dict[str, Any] = jwt.decode(
            token,
            key.public,
            algorithms=[ALGORITHM],
            # Expiry is checked against the engine's clock, not pyjwt's own reading.
            options={
                "require": ["sub", "type", "iat", "exp"],
                "verify_exp": False,
                "verify_iat": False,
                "verify_nbf": False,
            },
        )
        expires, issued, not_before = claims["exp"], claims["iat"], claims.get("nbf", 0)
        if any(type(t) not in (int, float) for t in (expires, issued, not_before)):
            raise jwt.InvalidTokenError("iat, nbf and exp must be numbers")
        now = self._clock.now()
        if expires <= now:
            raise jwt.ExpiredSignatureError("Signature has expired")
        if max(issued, not_before) > now + CLOCK_SKEW_S:
            # Signed "in the future" (RFC 8725): a clock gone wrong, or a key misused.
            raise jwt.ImmatureSignatureError("The token is not yet valid")
        if len(self._verified) >= _VERIFIED_KEPT:
            self._verified.clear()  # a rotation's leftovers and the long tail go together
        self._verified[(key.kid, token)] = claims
        return dict(claims)

    def _decode(self, token: str, *, expected_type: str) -> dict[str, Any]:
        if not token or len(token) > _MAX_TOKEN_CHARS:
            raise NotAuthenticated("the bearer token is not a valid Fluksio token")
        key = self._keys.current()
        try:
            claims = self._verified_claims(token, key)
        except jwt.ExpiredSignatureError as exc:
            raise NotAuthenticated(f"the {expected_type} token has expired") from exc
        except jwt.ImmatureSignatureError as exc:
            raise NotAuthenticated(
                f"the {expected_type} token is dated in the future (more than"
                f" {CLOCK_SKEW_S:g} s ahead of this engine's clock): mint a new one"
            ) from exc
        except jwt.InvalidSignatureError as exc:
            raise NotAuthenticated(
                "the token's signature does not match this engine's signing key (it was"
                " signed by another engine, or before the key was rotated)"
            ) from exc
        except jwt.MissingRequiredClaimError as exc:
            raise NotAuthenticated(
                f"the token lacks the {exc.claim!r} claim; it was not minted by this engine"
            ) from exc
        except jwt.InvalidTokenError as exc:
            raise NotAuthenticated("the bearer token is not a valid Fluksio token") from exc
        actual_type = claims.get("type")
        if actual_type != expected_type:
            raise NotAuthenticated(
                f"this is {_a(str(actual_type))} token where {_a(expected_type)} token is needed"
            )
        return claims


def _unverified_type(token: str) -> str | None:
    """The ``type`` claim, unverified: only to pick the verifier, which then checks all."""
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.InvalidTokenError:
        return None
    kind = claims.get("type") if isinstance(claims, dict) else None
    return kind if isinstance(kind, str) else None


def _a(kind: str) -> str:
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"
