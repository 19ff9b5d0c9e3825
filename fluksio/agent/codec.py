"""Frames to JSON and back, driven by their dataclasses: one encoder, one decoder.

Standard library only (the agent runs where nothing else may be installed). The engine
validates what a worker sends with pydantic over the same dataclasses; the agent reads
what the engine sends with :func:`decoded`, so a field added to a frame is declared once
and read on both ends without another line of parsing.

Decoding is as lenient as the protocol allows and no more: unknown keys are ignored (a
newer engine's additions), an absent field or a JSON ``null`` where the field has a
default is that default, a whole number stands for a float. Anything else of the wrong
type is a :class:`ValueError` whose sentence names the frame and the field.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, TypeVar

__all__ = ["decoded", "encode"]

_Decoded = TypeVar("_Decoded")

_LAYOUTS: dict[type, tuple[tuple[str, Any], ...]] = {}
"""Each frame class's fields, with the value a field is left out at (or a marker)."""
_KEEP = object()
"""A field that is always written."""


def _layout(kind: type) -> tuple[tuple[str, Any], ...]:
    """A frame class's field names, each with the value it is left out at
    (``_omit_at_default`` names those written only when they differ from their default)."""
    layout = _LAYOUTS.get(kind)
    if layout is None:
        omitted: frozenset[str] = getattr(kind, "_omit_at_default", frozenset())
        layout = _LAYOUTS[kind] = tuple(
            (f.name, f.default if f.name in omitted else _KEEP) for f in dataclasses.fields(kind)
        )
    return layout


def _plain(value: Any) -> Any:
    """A frame (or a frame within one) as a dict; any other value as it is.

    Not ``dataclasses.asdict``: that deep-copies every value, and a call's ``kwargs`` or
    ``result`` may be large.
    """
    kind = type(value)
    if not hasattr(kind, "__dataclass_fields__"):
        return value
    payload = {}
    for name, left_out_at in _layout(kind):
        item = getattr(value, name)
        if left_out_at is not _KEEP and item == left_out_at:
            continue
        payload[name] = _plain(item)
    return payload


def encode(frame: Any) -> str:
    """A frame as the JSON text sent on the socket."""
    return json.dumps(_plain(frame))


_FIELDS: dict[type, tuple[tuple[str, Any, bool], ...]] = {}


def _fields(kind: type) -> tuple[tuple[str, Any, bool], ...]:
    """A frame class's fields: name, type, and whether it has a default."""
    fields = _FIELDS.get(kind)
    if fields is None:
        hints = typing.get_type_hints(kind)
        fields = _FIELDS[kind] = tuple(
            (
                f.name,
                hints[f.name],
                f.default is not dataclasses.MISSING
                or f.default_factory is not dataclasses.MISSING,
            )
            for f in dataclasses.fields(kind)
            if f.init
        )
    return fields


def decoded(kind: type[_Decoded], raw: object, where: str = "") -> _Decoded:
    """``raw`` (parsed JSON) as a ``kind`` frame; see the module docstring. ``where`` names
    the frame in an error (``call c1``)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where or kind.__name__}: expected an object")
    given: dict[str, Any] = {}
    for name, hint, has_default in _fields(kind):
        value = raw.get(name)
        if value is None:
            if has_default:
                continue
            raise ValueError(f"{_joined(where, name)}: missing")
        given[name] = _value(hint, value, _joined(where, name))
    return kind(**given)


def _joined(where: str, name: str) -> str:
    """A field's place in a sentence: ``call c1: container.image``."""
    if not where:
        return name
    return f"{where}.{name}" if ": " in where else f"{where}: {name}"


_NAMES = {str: "text", int: "a whole number", float: "a number", bool: "true or false"}


def _value(hint: Any, value: Any, where: str) -> Any:
    """``value`` as type ``hint`` (the few types frames use), or :class:`ValueError`."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin is not None:
        return _composite(origin, typing.get_args(hint), value, where)
    if dataclasses.is_dataclass(hint):
        return decoded(hint, value, where)  # type: ignore[arg-type]
    if hint is float and type(value) is int:
        return float(value)
    if type(value) is not hint:
        raise ValueError(f"{where}: expected {_NAMES.get(hint, hint)}, got {type(value).__name__}")
    return value


def _composite(origin: Any, args: tuple[Any, ...], value: Any, where: str) -> Any:
    """``value`` as a literal, an optional value, a list or an object of such."""
    if origin is typing.Literal:
        if value not in args:
            raise ValueError(f"{where}: must be one of {', '.join(map(repr, args))}, not {value!r}")
        return value
    if origin is typing.Union or origin is types.UnionType:
        options = [a for a in args if a is not type(None)]
        if value is None and len(options) < len(args):
            return None
        if len(options) != 1:
            raise TypeError(f"{where}: a union of {options} cannot be decoded")
        return _value(options[0], value, where)
    if origin is list and isinstance(value, list):
        return [_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict and isinstance(value, dict):
        return {k: _value(args[1], v, f"{where}.{k}") for k, v in value.items()}
    raise ValueError(f"{where}: expected {'a list' if origin is list else 'an object'}")
