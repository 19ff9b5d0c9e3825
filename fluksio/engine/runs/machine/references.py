"""A run's parameters may name another run's node result: ``{"$result": {"run": ID,
"node": NODE}}``, anywhere in them. The run waits for that node; once it succeeds, its
result stands in the reference's place in what the run's calls receive. Plain data in and
out: the run machine decides when, this module only finds and replaces."""

from __future__ import annotations

from typing import Any

__all__ = ["RESULT", "BadReference", "Ref", "find_results", "substitute"]

RESULT = "$result"
Ref = tuple[str, str]
"""``(run id, node id)`` of a result a run waits for."""
_MOST = 1000
"""References in one run's parameters, at most."""


class BadReference(ValueError):
    """A malformed reference, or too many: ``where`` names the field."""

    def __init__(self, where: str, detail: str) -> None:
        super().__init__(detail)
        self.where = where
        self.detail = detail


def find_results(value: Any, where: str = "params") -> set[Ref]:
    """Every result ``value`` names; :class:`BadReference` for a malformed one."""
    found: set[Ref] = set()
    _find(value, where, found)
    if len(found) > _MOST:
        raise BadReference(where, f"names {len(found)} results; at most {_MOST}")
    return found


def _find(value: Any, where: str, found: set[Ref]) -> None:
    if isinstance(value, dict):
        if RESULT in value:
            target = value[RESULT]
            if (
                len(value) != 1
                or not isinstance(target, dict)
                or set(target) != {"run", "node"}
                or not all(isinstance(v, str) for v in target.values())
            ):
                raise BadReference(
                    where, 'a result reference is {"$result": {"run": "<id>", "node": "<id>"}}'
                )
            found.add((target["run"], target["node"]))
            return
        for key, item in value.items():
            _find(item, f"{where}.{key}", found)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _find(item, f"{where}.{index}", found)


def substitute(value: Any, given: dict[Ref, Any]) -> Any:
    """``value`` with each reference replaced by its result from ``given``."""
    if isinstance(value, dict):
        target = value.get(RESULT)
        if isinstance(target, dict) and len(value) == 1:
            return given[target["run"], target["node"]]
        return {key: substitute(item, given) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute(item, given) for item in value]
    return value
