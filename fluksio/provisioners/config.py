"""``provisioners.json``: read, validated per provisioner type, errors that say where.

Every error names the file, the provisioner (by name, else by position), the profile and
the field, in one sentence; an unknown ``type`` lists the installed types.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fluksio.errors import ConfigError
from fluksio.provisioners.base import ProvisionerSettings
from fluksio.provisioners.provisioner import Provisioner
from fluksio.validation import first_error

Loaded = tuple[type[Provisioner[Any, Any]], ProvisionerSettings[Any]]

__all__ = ["Loaded", "load_provisioners"]


def _where(path: Path, entry: Any, index: int) -> str:
    name = entry.get("name") if isinstance(entry, dict) else None
    return (
        f"{path}: provisioner {name!r}"
        if isinstance(name, str)
        else f"{path}: provisioner #{index + 1}"
    )


_LISTS = {"profiles": "profile", "hosts": "host"}


def _describe(error: ValidationError, entry: dict[str, Any]) -> str:
    first = error.errors()[0]
    location = list(first["loc"])
    message = first_error(error)[1]
    parts = []
    if len(location) >= 2 and location[0] in _LISTS and isinstance(location[1], int):
        # Profiles, or what a type calls them in its file (the SSH provisioner's hosts).
        noun = _LISTS[str(location[0])]
        profiles = entry.get(str(location[0]))
        profile = profiles[location[1]] if isinstance(profiles, list) else None
        label = profile.get("name") if isinstance(profile, dict) else None
        parts.append(
            f"{noun} {label!r}" if isinstance(label, str) else f"{noun} #{location[1] + 1}"
        )
        location = location[2:]
    field = ".".join(str(part) for part in location) or "entry"
    parts.append(f"field {field}: {message}")
    return ", ".join(parts)


def load_provisioners(path: Path, types: dict[str, type[Provisioner[Any, Any]]]) -> list[Loaded]:
    """Each configured provisioner's class and validated settings (none without a file)."""
    entries = _read_entries(path)
    if entries is None:
        return []
    loaded: list[Loaded] = []
    names: set[str] = set()
    for index, entry in enumerate(entries):
        where = _where(path, entry, index)
        kind, settings = _load_entry(where, entry, types)
        if settings.name in names:
            raise ConfigError(
                f"{where}, field name: another provisioner is named {settings.name!r}"
            )
        names.add(settings.name)
        profile_names = [profile.name for profile in settings.profiles]
        if len(set(profile_names)) != len(profile_names):
            raise ConfigError(f"{where}: two profiles (or hosts) share a name")
        loaded.append((kind, settings))
    return loaded


def _read_entries(path: Path) -> list[Any] | None:
    """The file's list of entries; None where there is no file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        entries = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(entries, list):
        raise ConfigError(f"{path} must hold a JSON list of provisioners")
    return entries


def _load_entry(where: str, entry: object, types: dict[str, type[Provisioner[Any, Any]]]) -> Loaded:
    """One entry's installed class and its validated settings."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be a JSON object")
    kind = types.get(str(entry.get("type")))
    if kind is None:
        installed = ", ".join(sorted(types)) or "none"
        raise ConfigError(
            f"{where}, field type: {entry.get('type')!r} is not an installed provisioner"
            f" type (installed: {installed})"
        )
    try:
        return kind, kind.settings_model.model_validate(entry)
    except ValidationError as exc:
        raise ConfigError(f"{where}, {_describe(exc, entry)}") from None
