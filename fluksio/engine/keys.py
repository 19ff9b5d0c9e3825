"""The engine's Ed25519 signing key: created on first use, replaced by ``keys rotate``.

The key file is the single source of truth. A running engine notices a rotation made by
another process (``fluksio keys rotate`` beside it) on the next token it signs or checks,
by the file's identity (inode and modification time), so rotation takes effect at once
without a restart: every token signed with the old key stops verifying.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from fluksio.engine.datadir import DataDir
from fluksio.errors import ConfigError

__all__ = ["KeyRing", "SigningKey"]


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey
    public: Ed25519PublicKey
    kid: str  # short fingerprint of the public key, carried in each token's header


def _fingerprint(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


class KeyRing:
    """Loads the signing key from the data directory and follows rotations of the file."""

    def __init__(self, data_dir: DataDir) -> None:
        self._data_dir = data_dir
        self._loaded: tuple[tuple[int, int], SigningKey] | None = None

    def current(self) -> SigningKey:
        path = self._data_dir.signing_key
        try:
            stat = path.stat()
        except FileNotFoundError:
            self._create()
            stat = path.stat()
        identity = (stat.st_ino, stat.st_mtime_ns)
        if self._loaded is None or self._loaded[0] != identity:
            self._loaded = (identity, self._read())
        return self._loaded[1]

    def rotate(self) -> SigningKey:
        """Replace the key; every token signed with the previous one stops verifying."""
        self._write(Ed25519PrivateKey.generate())
        self._loaded = None
        return self.current()

    def _create(self) -> None:
        self._data_dir.create_secret_once(
            self._data_dir.signing_key, _pem(Ed25519PrivateKey.generate())
        )

    def _write(self, key: Ed25519PrivateKey) -> None:
        self._data_dir.write_secret(self._data_dir.signing_key, _pem(key))

    def _read(self) -> SigningKey:
        path = self._data_dir.signing_key
        try:
            private = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read the signing key {path}: {exc}") from exc
        if not isinstance(private, Ed25519PrivateKey):
            raise ConfigError(f"the signing key {path} is not an Ed25519 key")
        public = private.public_key()
        return SigningKey(private=private, public=public, kid=_fingerprint(public))


def _pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
