"""The engine's Ed25519 signing key: created on first use, replaced by ``keys rotate``.

Where it is kept (:mod:`fluksio.engine.key_places`: a file of the data directory, or a
sealed row of the PostgreSQL database) is the single source of truth. A running engine
notices a rotation made by another process (``fluksio keys rotate`` beside it) on the
next token it signs or checks, by the key's identity, so rotation takes effect without a
restart: every token signed with the old key stops verifying.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from fluksio.engine.key_places import KeyPlace
from fluksio.errors import ConfigError

__all__ = ["KeyRing", "SigningKey"]

_NAME = "signing"


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey
    public: Ed25519PublicKey
    kid: str  # short fingerprint of the public key, carried in each token's header


def _fingerprint(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


class KeyRing:
    """Loads the signing key from where the engine keeps its keys, and follows
    replacements of it made by another process."""

    def __init__(self, place: KeyPlace) -> None:
        self._place = place
        self._loaded: tuple[object, SigningKey] | None = None

    def current(self) -> SigningKey:
        identity = self._place.identity(_NAME)
        if identity is None:
            self._place.create_once(_NAME, _pem(Ed25519PrivateKey.generate()))
            identity = self._place.identity(_NAME)
        if self._loaded is None or self._loaded[0] != identity:
            self._loaded = (identity, self._read())
        return self._loaded[1]

    def rotate(self) -> SigningKey:
        """Replace the key; every token signed with the previous one stops verifying."""
        self._place.write(_NAME, _pem(Ed25519PrivateKey.generate()))
        self._loaded = None
        return self.current()

    def _read(self) -> SigningKey:
        try:
            private = serialization.load_pem_private_key(self._place.read(_NAME), password=None)
        except ValueError as exc:
            raise ConfigError(f"cannot read the signing key: {exc}") from exc
        if not isinstance(private, Ed25519PrivateKey):
            raise ConfigError("the signing key is not an Ed25519 key")
        public = private.public_key()
        return SigningKey(private=private, public=public, kid=_fingerprint(public))


def _pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
