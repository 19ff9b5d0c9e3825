"""Building the plugin manager: specs, entry points, check; never at import time.

Every plugin, the built-in Slurm provisioner included, is found through the
``fluksio.provisioners`` entry-point group. A plugin that fails to import or implements a
hook wrongly is reported by name and left out; it never takes the engine down.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy

from fluksio.provisioners import hookspecs
from fluksio.provisioners.provisioner import Provisioner

__all__ = ["ENTRY_POINT_GROUP", "PluginFailure", "Plugins", "build_plugins"]

ENTRY_POINT_GROUP = "fluksio.provisioners"


@dataclass(frozen=True)
class PluginFailure:
    name: str
    error: str


@dataclass
class Plugins:
    manager: pluggy.PluginManager
    failures: list[PluginFailure]

    def provisioner_types(self) -> dict[str, type[Provisioner[Any, Any]]]:
        """Installed provisioner types by ``type`` name; duplicates are an error."""
        found: dict[str, type[Provisioner[Any, Any]]] = {}
        for answer in self.manager.hook.fluksio_provisioner_types():
            for kind in answer:
                if kind.type_name in found and found[kind.type_name] is not kind:
                    raise ValueError(
                        f"two plugins provide provisioner type {kind.type_name!r}:"
                        f" {found[kind.type_name].__module__} and {kind.__module__}"
                    )
                found[kind.type_name] = kind
        return found


def build_plugins(points: Iterable[EntryPoint] | None = None) -> Plugins:
    """A fresh plugin manager with every installed plugin that loads and checks."""
    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    failures: list[PluginFailure] = []
    chosen = entry_points(group=ENTRY_POINT_GROUP) if points is None else points
    for point in chosen:
        try:
            plugin = point.load()
            manager.register(plugin, name=point.name)
        except Exception as exc:
            failures.append(PluginFailure(point.name, f"{type(exc).__name__}: {exc}"))
            continue
        try:
            manager.check_pending()
        except pluggy.PluginValidationError as exc:
            manager.unregister(name=point.name)
            failures.append(PluginFailure(point.name, str(exc)))
    return Plugins(manager, failures)
