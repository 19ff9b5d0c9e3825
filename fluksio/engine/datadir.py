"""Where the engine keeps its state, and who may read it.

Layout of a data directory (created 0700; secrets in it 0600)::

    fluksio.sqlite3        state: users, worker tokens, and what later layers add
    signing_key.pem        the Ed25519 key every access and worker token is signed with
    engine.json            while an engine runs: its pid and URL, for the CLI and tests
    engine.lock            held by the running engine: one engine per data directory
    provisioners.json      optional: the batch schedulers the engine may ask for machines
    secrets.key            the AES-256-GCM key secret values are encrypted with at rest
    artifacts/             the content-addressed artifact store (sha256/<2 hex>/<hex>)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from fluksio.errors import ConfigError

__all__ = ["DataDir", "default_data_dir"]

_DIR_MODE = 0o700
_SECRET_MODE = 0o600


def default_data_dir() -> Path:
    """``$FLUKSIO_DATA_DIR``, else ``$XDG_DATA_HOME/fluksio``, else ``~/.local/share/fluksio``."""
    explicit = os.environ.get("FLUKSIO_DATA_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "share"
    return base / "fluksio"


@dataclass(frozen=True)
class DataDir:
    """Paths inside one data directory; :meth:`ensure` creates it safely."""

    root: Path

    @property
    def database(self) -> Path:
        return self.root / "fluksio.sqlite3"

    @property
    def signing_key(self) -> Path:
        return self.root / "signing_key.pem"

    @property
    def engine_info(self) -> Path:
        return self.root / "engine.json"

    @property
    def lock(self) -> Path:
        return self.root / "engine.lock"

    @property
    def provisioners(self) -> Path:
        return self.root / "provisioners.json"

    def provisioner_state(self, name: str) -> Path:
        """What one provisioner keeps between calls (its shared SSH connection)."""
        return self.root / "provisioners" / name

    @property
    def secrets_key(self) -> Path:
        return self.root / "secrets.key"

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    def ensure(self) -> DataDir:
        """Create the directory (0700) if missing; refuse one others can read."""
        try:
            self.root.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the data directory {self.root}: {exc.strerror}"
            ) from exc
        if not self.root.is_dir():
            raise ConfigError(f"the data directory {self.root} exists but is not a directory")
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise ConfigError(f"the data directory {self.root} is not writable by this user")
        mode = self.root.stat().st_mode & 0o777
        if mode & 0o077:
            # Created by someone else or loosened by hand: the key and database are in here.
            os.chmod(self.root, _DIR_MODE)
        return self

    def write_secret(self, path: Path, data: bytes) -> None:
        """Write ``data`` to ``path`` atomically, readable only by this user."""
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _SECRET_MODE)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def create_secret_once(self, path: Path, data: bytes) -> bytes:
        """Create ``path`` (0600) holding ``data`` unless it exists; its contents either way.

        Written under a temporary name and linked into place, so two processes starting
        at once on a fresh directory agree on one file.
        """
        try:
            return path.read_bytes()
        except FileNotFoundError:
            pass
        tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
        self.write_secret(tmp, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        return path.read_bytes()

    def write_engine_info(self, *, pid: int, url: str) -> None:
        self.write_secret(self.engine_info, json.dumps({"pid": pid, "url": url}).encode())

    def read_engine_info(self) -> dict[str, object] | None:
        try:
            loaded = json.loads(self.engine_info.read_text())
        except (OSError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) else None
