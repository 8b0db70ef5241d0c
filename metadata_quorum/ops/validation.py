"""Argument checking shared by the operations: bad input becomes INVALID_REQUEST with a clear message."""
from __future__ import annotations

from typing import Any, Mapping

from metadata_quorum.errors import ErrorCode, FerryError


def invalid(message: str) -> FerryError:
    return FerryError(ErrorCode.INVALID_REQUEST, message)


def req_int(args: Mapping[str, Any], name: str, minimum: int | None = None) -> int:
    if name not in args or args[name] is None:
        raise invalid(f"missing required field {name!r}")
    return as_int(args[name], name, minimum)


def opt_int(args: Mapping[str, Any], name: str, default: int, minimum: int | None = None) -> int:
    if args.get(name) is None:
        return default
    return as_int(args[name], name, minimum)


def as_int(value: Any, name: str, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and value.lstrip("-").isdigit():
            value = int(value)
        else:
            raise invalid(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise invalid(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def req_str(args: Mapping[str, Any], name: str, allow_empty: bool = False) -> str:
    value = args.get(name)
    if not isinstance(value, str) or (not value and not allow_empty):
        raise invalid(f"{name} must be a non-empty string, got {value!r}")
    return value


def opt_str(args: Mapping[str, Any], name: str, default: str | None = None) -> str | None:
    value = args.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string, got {value!r}")
    return value


def opt_bool(args: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = args.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"{name} must be true or false, got {value!r}")
    return value


def req_list(args: Mapping[str, Any], name: str) -> list[Any]:
    value = args.get(name)
    if not isinstance(value, (list, tuple)):
        raise invalid(f"{name} must be a list, got {value!r}")
    return list(value)


def opt_list(args: Mapping[str, Any], name: str) -> list[Any] | None:
    if args.get(name) is None:
        return None
    return req_list(args, name)


def str_list(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise invalid(f"{name} must be a list of strings, got {value!r}")
    return tuple(value)


def as_mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise invalid(f"{name} must be an object, got {value!r}")
    return value


def item_error(error: ErrorCode, message: str) -> dict[str, Any]:
    """The per-item error fields of a batch reply (Kafka answers batches item by item)."""
    return {"error": error.name, "code": error.code, "message": message}
