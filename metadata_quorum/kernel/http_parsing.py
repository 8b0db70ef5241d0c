"""Strict parsing of HTTP requests and one error body, shared by the controller and broker APIs.

Both APIs take JSON bodies and integer query parameters from anyone who can reach the port, so
both parse them the same way and answer every refusal the same way: Kafka's error name and code as
``{"error", "code", "message"}`` with the error's HTTP status. A request the server cannot
understand is the caller's mistake and gets a 4xx, never a 500 with a traceback:

- a body is bounded in size (aiohttp's ``client_max_size``), must be UTF-8 JSON, non-empty, an
  object where an object is expected, nested at most :data:`MAX_JSON_DEPTH` deep, with integers
  of at most :data:`MAX_JSON_INT_DIGITS` digits, no duplicate keys and no ``NaN``/``Infinity``
  (the parser's recursion and Python's 4,300-digit limit are not a client's business);
- a query parameter appears at most once, only where the endpoint knows it, and an integer one is
  plain ASCII decimal (:func:`metadata_quorum.kernel.validation.parse_decimal`);
- unknown paths and methods get the same JSON body (INVALID_REQUEST) as every other refusal.

Field types inside a body are checked by :mod:`metadata_quorum.kernel.validation`, the same rules
the controller's operations use.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Awaitable, Callable, Collection, Mapping

from aiohttp import web
from aiohttp.typedefs import Middleware
from multidict import MultiMapping

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.validation import MAX_STRING_CHARS, as_str, invalid, parse_decimal

log = logging.getLogger("ferry.http")

MAX_JSON_DEPTH = 32
MAX_JSON_INT_DIGITS = 20  # int64 needs 19 digits and a sign

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ErrorObserver = Callable[[web.Request, FerryError], None]


class _JsonRefused(ValueError):
    """A JSON value valid to the grammar but refused here (a duplicate key, a huge integer, NaN)."""


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise _JsonRefused(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_JSON_INT_DIGITS})")
    return int(text)


def _parse_constant(name: str) -> float:
    raise _JsonRefused(f"{name} is not JSON")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _JsonRefused(f"the key {dup[:80]!r} appears more than once in an object")
    return obj


def json_depth(value: Any) -> int:
    """How deeply ``value`` nests lists and objects (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Collection[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            return depth
        stack.extend((child, depth) for child in children)
    return deepest


def parse_json(raw: bytes, what: str = "the request body") -> Any:
    """``raw`` as JSON under the rules above, or INVALID_REQUEST saying why not. Pure."""
    if not raw:
        raise invalid(f"{what} is empty; a JSON value is required")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise invalid(f"{what} is not UTF-8: {e.reason} at byte {e.start}") from None
    try:
        value = json.loads(text, parse_int=_parse_int, parse_constant=_parse_constant,
                           object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise invalid(f"{what} nests deeper than {MAX_JSON_DEPTH} levels") from None
    except _JsonRefused as e:
        raise invalid(f"{what} is refused: {e}") from None
    except json.JSONDecodeError as e:
        raise invalid(f"{what} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except ValueError as e:  # any other limit of the decoder
        raise invalid(f"{what} is refused: {e}") from None
    if json_depth(value) > MAX_JSON_DEPTH:
        raise invalid(f"{what} nests deeper than {MAX_JSON_DEPTH} levels")
    return value


def parse_json_object(raw: bytes, what: str = "the request body") -> dict[str, Any]:
    value = parse_json(raw, what)
    if not isinstance(value, dict):
        raise invalid(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


#: a body at least this large is parsed on a worker thread: a 10,000-partition request is ~1 MB
#: of JSON, ~0.2 s to parse and check, during which the loop would read no heartbeat (the
#: interpreter switches back to the loop every few milliseconds while a thread parses)
OFF_LOOP_BYTES = 64 * 1024


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The request's body as a JSON object (a body over ``client_max_size`` is answered 413 by the
    middleware, from aiohttp's HTTPRequestEntityTooLarge)."""
    raw = await request.read()
    if len(raw) >= OFF_LOOP_BYTES:
        return await asyncio.to_thread(parse_json_object, raw)
    return parse_json_object(raw)


# -- query parameters ----------------------------------------------------------------------------------


def check_query_names(query: MultiMapping[str], known: Collection[str]) -> None:
    """Every parameter is one the endpoint knows, given once: a misspelt or repeated parameter
    would otherwise be silently ignored or silently resolved to one of its values."""
    names = [name for name, _value in query.items()]
    for name in names:
        if name not in known:
            shown = sorted(known)
            raise invalid(f"unknown query parameter {name[:80]!r}; known: {shown}" if shown
                          else f"unknown query parameter {name[:80]!r}; this endpoint takes none")
        if names.count(name) > 1:
            raise invalid(f"query parameter {name!r} is given more than once")


def query_str(query: MultiMapping[str], name: str, default: str | None = None,
              max_chars: int = MAX_STRING_CHARS) -> str | None:
    values = query.getall(name, [])
    if len(values) > 1:
        raise invalid(f"query parameter {name!r} is given more than once")
    if not values:
        return default
    return as_str(values[0], name, max_chars)


def query_int(query: MultiMapping[str], name: str, default: int | None = None, *, minimum: int | None = None,
              maximum: int | None = None, allow_negative: bool = False) -> int:
    """An integer query parameter (required when ``default`` is None); see ``parse_decimal``."""
    raw = query_str(query, name)
    if raw is None:
        if default is None:
            raise invalid(f"query parameter {name!r} is required")
        return default
    return parse_decimal(raw, name, allow_negative=allow_negative, minimum=minimum, maximum=maximum)


def path_int(match_info: Mapping[str, str], name: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    """An integer path segment (a partition index): the same decimal rule as a query parameter."""
    return parse_decimal(match_info[name], name, minimum=minimum, maximum=maximum)


# -- answers -------------------------------------------------------------------------------------------


def error_response(err: FerryError, status: int | None = None) -> web.Response:
    """Kafka's error body with the error's HTTP status; a wait the server asks for becomes Retry-After."""
    response = web.Response(body=json.dumps(err.to_json(), separators=(",", ":")).encode(),
                            status=status or err.error.http_status, content_type="application/json")
    retry_after_ms = (err.details or {}).get("retry_after_ms")
    if isinstance(retry_after_ms, int) and not isinstance(retry_after_ms, bool):
        response.headers["Retry-After"] = str(max(1, -(-retry_after_ms // 1000)))  # whole seconds, rounded up
    return response


def http_error(request: web.Request, exc: web.HTTPException, api_doc: str) -> tuple[FerryError, int]:
    """aiohttp's own refusals (no route, wrong method, body too large, ...) as Kafka errors."""
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        message = f"{request.method} {request.path}: the body is larger than this endpoint accepts ({exc.text})"
    else:
        message = f"{request.method} {request.path[:200]}: {exc.reason} (see {api_doc})"
    return FerryError(ErrorCode.INVALID_REQUEST, message), exc.status


def errors_middleware(api_doc: str, on_error: ErrorObserver | None = None) -> Middleware:
    """Every FerryError and every aiohttp refusal becomes the JSON error body; anything else is a
    bug, logged with its traceback and answered ``500 UNKNOWN_SERVER_ERROR``."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except FerryError as exc:
            if on_error is not None:
                on_error(request, exc)
            return error_response(exc)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            err, status = http_error(request, exc, api_doc)
            if on_error is not None:
                on_error(request, err)
            response = error_response(err, status)
            if isinstance(exc, web.HTTPMethodNotAllowed):
                response.headers["Allow"] = ",".join(sorted(exc.allowed_methods))
            return response
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every answer carries a Kafka error name
            log.exception("unexpected error in %s %s", request.method, request.path)
            return error_response(FerryError(ErrorCode.UNKNOWN_SERVER_ERROR, f"internal error: {type(exc).__name__}"))

    return middleware
