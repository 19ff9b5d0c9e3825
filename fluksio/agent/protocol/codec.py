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
import functools
import json
import types
import typing
from collections.abc import Callable
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


_Convert = Callable[[Any], Any]


class _Wrong(ValueError):
    """A value of the wrong shape, at ``path`` within the field being read."""

    def __init__(self, path: str, said: str) -> None:
        super().__init__(said)
        self.path = path
        self.said = said


def _within(name: str, wrong: _Wrong) -> _Wrong:
    """``wrong`` as seen from the field ``name`` that holds it."""
    inner = wrong.path
    return _Wrong(name + (inner if inner.startswith("[") or not inner else "." + inner), wrong.said)


_FIELDS: dict[type, tuple[tuple[str, _Convert, bool], ...]] = {}


def _fields(kind: type) -> tuple[tuple[str, _Convert, bool], ...]:
    """A frame class's fields: name, how its value is read, and whether it has a default."""
    fields = _FIELDS.get(kind)
    if fields is None:
        hints = typing.get_type_hints(kind)
        fields = _FIELDS[kind] = tuple(
            (
                f.name,
                _converter(hints[f.name]),
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
    try:
        return _decode(kind, raw)
    except _Wrong as wrong:
        place = f"{where}: {wrong.path}" if where and wrong.path else where or wrong.path
        raise ValueError(f"{place or kind.__name__}: {wrong.said}") from None


def _decode(kind: type[_Decoded], raw: object) -> _Decoded:
    if not isinstance(raw, dict):
        raise _Wrong("", "expected an object")
    given: dict[str, Any] = {}
    for name, convert, has_default in _fields(kind):
        value = raw.get(name)
        if value is None:
            if has_default:
                continue
            raise _Wrong(name, "missing")
        try:
            given[name] = convert(value)
        except _Wrong as wrong:
            raise _within(name, wrong) from None
    return kind(**given)


_NAMES = {str: "text", int: "a whole number", float: "a number", bool: "true or false"}


@functools.cache
def _converter(hint: Any) -> _Convert:
    """How a value of type ``hint`` (the few types frames use) is read: made once a type,
    so that reading a frame asks nothing of ``typing``."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return _as_it_is
    if origin is not None:
        return _composite(origin, typing.get_args(hint))
    if dataclasses.is_dataclass(hint):
        return functools.partial(_decode, typing.cast(type, hint))
    if hint is float:
        return _number
    name = _NAMES.get(hint, str(hint))

    def exactly(value: Any) -> Any:
        if type(value) is not hint:
            raise _Wrong("", f"expected {name}, got {type(value).__name__}")
        return value

    return exactly


def _as_it_is(value: Any) -> Any:
    return value


def _number(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    raise _Wrong("", f"expected a number, got {type(value).__name__}")


def _composite(origin: Any, args: tuple[Any, ...]) -> _Convert:
    """How a literal, an optional value, a list or an object of such is read."""
    if origin is typing.Literal:
        allowed = ", ".join(map(repr, args))

        def one_of(value: Any) -> Any:
            if value not in args:
                raise _Wrong("", f"must be one of {allowed}, not {value!r}")
            return value

        return one_of
    if origin is typing.Union or origin is types.UnionType:
        options = [a for a in args if a is not type(None)]
        if len(options) != 1:
            raise TypeError(f"a union of {options} cannot be decoded")
        inner = _converter(options[0])
        return lambda value: None if value is None else inner(value)
    if origin is list:
        return functools.partial(_list, _converter(args[0]))
    if origin is dict:
        return functools.partial(_object, None if args[1] is Any else _converter(args[1]))
    raise TypeError(f"{origin} cannot be decoded")


def _list(item: _Convert, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise _Wrong("", "expected a list")
    try:
        return [item(v) for v in value]
    except _Wrong:
        for i, v in enumerate(value):
            try:
                item(v)
            except _Wrong as wrong:
                raise _within(f"[{i}]", wrong) from None
        raise


def _object(item: _Convert | None, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Wrong("", "expected an object")
    if item is None:
        return value
    converted = {}
    for key, v in value.items():
        try:
            converted[key] = item(v)
        except _Wrong as wrong:
            raise _within(str(key), wrong) from None
    return converted
