"""Argument checking shared by the operations: bad input becomes INVALID_REQUEST with a clear message.

One rule per concept, used by the controller's operations and by both HTTP front ends
(:mod:`metadata_quorum.kernel.http_parsing`): an integer is a JSON integer (never a bool, a float or a
string of digits), within int64 unless a tighter range is given; a string or a list has a bounded
size; a number written in text (a query parameter, an object key) is plain ASCII decimal. Coercing
``1.5`` or ``"01"`` to an integer once moved the wrong partition; refusing is the only answer that
cannot surprise the caller.
"""
from __future__ import annotations

from typing import Any, Mapping

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.messages.common import ItemError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
INT16_MAX = 2**15 - 1
MAX_PARTITIONS_PER_REQUEST = 10_000  # as KRaft's controller bounds one request's partitions
MAX_STRING_CHARS = 32_767  # Kafka's STRING: an int16 length
MAX_LIST_ITEMS = 100_000
MAX_DECIMAL_CHARS = 20  # "-9223372036854775808"


def invalid(message: str) -> FerryError:
    return FerryError(ErrorCode.INVALID_REQUEST, message)


def _shown(value: Any) -> str:
    """A value for an error message, cut short: messages echo input, and input may be huge."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def req_int(args: Mapping[str, Any], name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    if name not in args or args[name] is None:
        raise invalid(f"missing required field {name!r}")
    return as_int(args[name], name, minimum, maximum)


def opt_int(args: Mapping[str, Any], name: str, default: int, minimum: int | None = None,
            maximum: int | None = None) -> int:
    if args.get(name) is None:
        return default
    return as_int(args[name], name, minimum, maximum)


def as_int(value: Any, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` if it is an integer within [minimum, maximum] (int64 by default); nothing is coerced."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"{name} must be an integer, got {_shown(value)}")
    low = INT64_MIN if minimum is None else minimum
    high = INT64_MAX if maximum is None else maximum
    if value < low:
        raise invalid(f"{name} must be >= {low}, got {_shown(value)}")
    if value > high:
        raise invalid(f"{name} must be <= {high}, got {_shown(value)}")
    return value


def parse_decimal(text: str, name: str, *, allow_negative: bool = False, minimum: int | None = None,
                  maximum: int | None = None) -> int:
    """An integer written in text: ASCII digits, one leading '-' only where negatives make sense,
    no '+', no leading zeros (but "0"), no whitespace, at most 20 characters.

    Python's ``int`` accepts ``' 1'``, ``'+1'``, ``'01'``, ``'1_0'`` and non-ASCII digits; each is a
    second spelling of a number, and a second spelling is how a request slips past a check."""
    negative = allow_negative and text.startswith("-")
    digits = text[1:] if negative else text
    if not (0 < len(text) <= MAX_DECIMAL_CHARS and digits and digits.isascii() and digits.isdigit()) \
            or (digits != "0" and digits.startswith("0")) or text == "-0":
        sign = "an optional '-' and " if allow_negative else ""
        raise invalid(f"{name} is not an integer written as {sign}ASCII decimal digits without leading zeros: "
                      f"{_shown(text)}")
    return as_int(-int(digits) if negative else int(digits), name, minimum, maximum)


def req_str(args: Mapping[str, Any], name: str, allow_empty: bool = False, max_chars: int = MAX_STRING_CHARS) -> str:
    value = args.get(name)
    if not isinstance(value, str) or (not value and not allow_empty):
        raise invalid(f"{name} must be a non-empty string, got {_shown(value)}")
    return as_str(value, name, max_chars)


def opt_str(args: Mapping[str, Any], name: str, default: str | None = None,
            max_chars: int = MAX_STRING_CHARS) -> str | None:
    value = args.get(name)
    if value is None:
        return default
    return as_str(value, name, max_chars)


def as_str(value: Any, name: str, max_chars: int = MAX_STRING_CHARS) -> str:
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string, got {_shown(value)}")
    if len(value) > max_chars:
        raise invalid(f"{name} must be at most {max_chars} characters, got {len(value)}")
    return value


def opt_bool(args: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = args.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"{name} must be true or false, got {_shown(value)}")
    return value


def req_list(args: Mapping[str, Any], name: str, max_items: int = MAX_LIST_ITEMS) -> list[Any]:
    return as_list(args.get(name), name, max_items)


def opt_list(args: Mapping[str, Any], name: str, max_items: int = MAX_LIST_ITEMS) -> list[Any] | None:
    if args.get(name) is None:
        return None
    return req_list(args, name, max_items)


def as_list(value: Any, name: str, max_items: int = MAX_LIST_ITEMS) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise invalid(f"{name} must be a list, got {_shown(value)}")
    if len(value) > max_items:
        raise invalid(f"{name} must have at most {max_items} items, got {len(value)}")
    return list(value)


def str_list(value: Any, name: str, max_items: int = MAX_LIST_ITEMS, max_chars: int = MAX_STRING_CHARS) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise invalid(f"{name} must be a list of strings, got {_shown(value)}")
    return tuple(as_str(v, f"{name}[]", max_chars) for v in as_list(value, name, max_items))


def as_mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise invalid(f"{name} must be an object, got {_shown(value)}")
    return value


def item_error(error: ErrorCode, message: str) -> ItemError:
    """The per-item error fields of a batch reply (Kafka answers batches item by item)."""
    return {"error": error.name, "code": error.code, "message": message}
