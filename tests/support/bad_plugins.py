"""Plugins that are wrong on purpose, loaded through entry points by the plugin tests."""

from __future__ import annotations

from typing import Any

from fluksio.provisioners import hookimpl


class _Misspelt:
    @hookimpl
    def fluksio_provisoner_types(self) -> list[Any]:  # no such hook: must be reported
        return []


class _WrongSignature:
    @hookimpl
    def fluksio_provisioner_types(self, extra: int) -> list[Any]:  # takes what no spec gives
        return []


misspelt = _Misspelt()
wrong_signature = _WrongSignature()
