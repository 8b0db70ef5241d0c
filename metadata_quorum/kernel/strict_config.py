"""One strict loader for every Ferry config file (controller, broker, stream storage).

A config is a frozen dataclass; this module turns a JSON object into it and refuses anything it
does not understand, because a misspelt key that is silently ignored leaves a setting at its
default with nobody the wiser. Every refusal is ``INVALID_CONFIG`` and names the key by its full
path (``raft.raft_min_timeout_s``, ``s3.retry.max_attempts``).

What a field accepts comes from its type annotation:

- ``bool``, ``str``, ``int`` (never a bool), ``float`` (an int is fine too);
- ``X | None``, ``tuple[X, ...]`` (from a JSON list), ``dict[str, Any]`` (an object the owner
  checks further), ``Literal[...]`` and nested config dataclasses;
- ``Annotated[int, Range(...)]`` for bounds: ``PositiveInt``, ``NonNegativeInt``, ``Port``,
  ``PositiveFloat``, ``NonNegativeFloat``, ``Fraction`` (strictly between 0 and 1); a float must
  be finite (YAML's ``.inf`` and ``.nan``, JSON's ``Infinity`` and ``NaN`` are refused);
- ``Annotated[str, SECRET]`` for a secret: it must be non-empty, and neither an error message nor
  the dataclass's repr ever shows its value (declare such fields with ``field(repr=False)``).

Checks between fields (heartbeat below the session timeout, ...) stay with the config that owns
them, after ``build`` returns.
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from metadata_quorum.kernel.errors import ErrorCode, FerryError

T = TypeVar("T")


@dataclass(frozen=True)
class Range:
    """Inclusive bounds of a number (``above`` and ``below`` are exclusive bounds, for floats)."""

    at_least: float | None = None
    at_most: float | None = None
    above: float | None = None
    below: float | None = None

    def describe(self) -> str:
        parts = []
        if self.above is not None:
            parts.append(f"> {self.above:g}")
        if self.at_least is not None:
            parts.append(f">= {self.at_least:g}")
        if self.at_most is not None:
            parts.append(f"<= {self.at_most:g}")
        if self.below is not None:
            parts.append(f"< {self.below:g}")
        return " and ".join(parts)

    def holds(self, value: float) -> bool:
        return ((self.above is None or value > self.above)
                and (self.at_least is None or value >= self.at_least)
                and (self.at_most is None or value <= self.at_most)
                and (self.below is None or value < self.below))


class _Secret:
    """Marks a string whose value must never be printed."""

    def __repr__(self) -> str:
        return "SECRET"


SECRET = _Secret()

PositiveInt = Annotated[int, Range(at_least=1)]
NonNegativeInt = Annotated[int, Range(at_least=0)]
Port = Annotated[int, Range(at_least=0, at_most=65535)]
PositiveFloat = Annotated[float, Range(above=0.0)]
NonNegativeFloat = Annotated[float, Range(at_least=0.0)]
Fraction = Annotated[float, Range(above=0.0, below=1.0)]
Secret = Annotated[str, SECRET]


def invalid(message: str) -> FerryError:
    return FerryError(ErrorCode.INVALID_CONFIG, message)


def build(cls: type[T], data: object, what: str, prefix: str = "", given: dict[str, Any] | None = None) -> T:
    """The dataclass ``cls`` from the JSON object ``data``; ``what`` names the config in messages
    ("broker", "controller"), ``prefix`` is the path of ``data`` inside it. ``given`` holds fields
    the caller has already parsed (they are not keys of the JSON object)."""
    given = given or {}
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    where = f"'{prefix.rstrip('.')}'" if prefix else f"the {what} config"
    if not isinstance(data, dict):
        raise invalid(f"{where} must be a JSON object, got {_kind(data)}")
    hints = typing.get_type_hints(cls, include_extras=True)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init and f.name not in given}
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise invalid(f"unknown {what} setting {', '.join(repr(prefix + k) for k in unknown)}; "
                      f"known{' in ' + where if prefix else ''}: {', '.join(sorted(known))}")
    values: dict[str, Any] = dict(given)
    for name, f in known.items():
        path = prefix + name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise invalid(f"{what} setting '{path}' is required")
            continue
        values[name] = check(hints[name], data[name], what, path)
    return cls(**values)


def check(hint: Any, value: Any, what: str, path: str) -> Any:
    """``value`` converted to the annotated type, or INVALID_CONFIG naming ``path``."""
    secret = False
    bounds: Range | None = None
    if typing.get_origin(hint) is Annotated:
        base, *extras = typing.get_args(hint)
        secret = any(e is SECRET for e in extras)
        bounds = next((e for e in extras if isinstance(e, Range)), None)
        hint = base
    shown = "the value given" if secret else _show(value)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if value is None and len(options) < len(args):
            return None
        if len(options) == 1:
            return check(options[0] if not secret else Annotated[options[0], SECRET], value, what, path)
        raise TypeError(f"unsupported union {hint!r} for {path}")
    if hint is Any:
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise invalid(f"{what} setting '{path}' must be true or false, got {shown}")
        return value
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise invalid(f"{what} setting '{path}' must be an integer, got {shown}")
        result: Any = value
    elif hint is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise invalid(f"{what} setting '{path}' must be a number, got {shown}")
        if isinstance(value, float) and not math.isfinite(value):
            raise invalid(f"{what} setting '{path}' must be a finite number, got {shown}")
        result = float(value)
    elif hint is str:
        if not isinstance(value, str):
            raise invalid(f"{what} setting '{path}' must be a string, got {shown}")
        if secret and not value:
            raise invalid(f"{what} setting '{path}' must not be empty")
        return value
    elif origin is Literal:
        if value not in args:
            raise invalid(f"{what} setting '{path}' must be one of {', '.join(map(repr, args))}, got {shown}")
        return value
    elif origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise invalid(f"{what} setting '{path}' must be a list, got {shown}")
        item = args[0]
        return tuple(check(item, v, what, f"{path}[{i}]") for i, v in enumerate(value))
    elif origin is dict:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise invalid(f"{what} setting '{path}' must be a JSON object, got {shown}")
        return {k: check(args[1], v, what, f"{path}.{k}") for k, v in value.items()}
    elif dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return build(hint, value, what, prefix=path + ".")
    else:
        raise TypeError(f"unsupported config type {hint!r} for {path}")
    if bounds is not None and not bounds.holds(result):
        raise invalid(f"{what} setting '{path}' must be {bounds.describe()}, got {shown}")
    return result


def load_json(path: str, what: str) -> Any:
    """A config file's JSON; a missing or malformed file is INVALID_CONFIG saying which and why."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise invalid(f"cannot read {what} config {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise invalid(f"{what} config {path} is not valid JSON: {exc}") from None


def _kind(value: object) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
