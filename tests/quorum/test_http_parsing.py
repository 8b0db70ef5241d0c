"""The shared request parser (metadata_quorum/kernel/http_parsing.py) and the field rules it reuses, without sockets."""
from __future__ import annotations

import pytest
from multidict import MultiDict, MultiDictProxy

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.http_parsing import (
    MAX_JSON_DEPTH, check_query_names, json_depth, parse_json, parse_json_object, query_int, query_str,
)
from metadata_quorum.kernel.validation import as_int, as_list, as_str, parse_decimal


def refused(fn, *args, **kwargs) -> FerryError:  # type: ignore[no-untyped-def]
    with pytest.raises(FerryError) as info:
        fn(*args, **kwargs)
    assert info.value.error is ErrorCode.INVALID_REQUEST
    return info.value


def q(*pairs: tuple[str, str]) -> MultiDictProxy[str]:
    return MultiDictProxy(MultiDict(pairs))


@pytest.mark.parametrize("raw", [b"", b" ", b"{", b"nul", b"\xff\xfe{}", b"{} {}", b"{'a': 1}",
                                 b'{"a": NaN}', b'{"a": Infinity}', b'{"a": -Infinity}', b'{"a": 1, "a": 2}'])
def test_bodies_that_are_not_json_objects_we_take(raw: bytes) -> None:
    refused(parse_json_object, raw)


def test_deep_nesting_and_huge_integers_are_refused_not_crashes() -> None:
    assert "deeper" in refused(parse_json, b"[" * 50_000 + b"]" * 50_000).message
    assert "deeper" in refused(parse_json, b'{"a":' * 50_000 + b"1" + b"}" * 50_000).message
    nested = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    assert "deeper" in refused(parse_json, nested).message
    assert parse_json(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH) is not None
    assert "digits" in refused(parse_json, b'{"n": ' + b"9" * 5000 + b"}").message
    assert "digits" in refused(parse_json, b'{"n": -' + b"9" * 21 + b"}").message
    assert parse_json(b'{"n": -9223372036854775808}') == {"n": -(2**63)}


def test_top_level_must_be_an_object() -> None:
    for raw in (b"[]", b"1", b'"x"', b"null", b"true"):
        assert "JSON object" in refused(parse_json_object, raw).message
    assert parse_json_object(b'{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}


def test_json_depth_counts_containers_only() -> None:
    assert json_depth(1) == 0
    assert json_depth({"a": [1, {"b": []}]}) == 4


@pytest.mark.parametrize("text", ["", " 1", "1 ", "+1", "01", "00", "-0", "-", "--1", "1_0", "1.0", "1e3", "0x1",
                                  "١", "１", "²", "9" * 21, "\t1", "1\n"])
def test_decimal_text_has_one_spelling(text: str) -> None:
    refused(parse_decimal, text, "n", allow_negative=True)


def test_decimal_text_accepts_plain_numbers_and_bounds_them() -> None:
    assert parse_decimal("0", "n") == 0
    assert parse_decimal("10", "n") == 10
    assert parse_decimal("-7", "n", allow_negative=True) == -7
    refused(parse_decimal, "-7", "n")
    refused(parse_decimal, "11", "n", maximum=10)
    refused(parse_decimal, "9223372036854775808", "n")


@pytest.mark.parametrize("value", [True, False, 1.5, 1.0, "1", None, [1], {"a": 1}, 2**63])
def test_integers_are_integers(value: object) -> None:
    refused(as_int, value, "n")


def test_strings_and_lists_are_bounded() -> None:
    assert as_str("x" * 10, "s", 10) == "x" * 10
    refused(as_str, "x" * 11, "s", 10)
    refused(as_str, 1, "s")
    refused(as_list, [0] * 4, "l", 3)
    refused(as_list, "abc", "l")


def test_query_parameters() -> None:
    assert query_int(q(), "offset", 5) == 5
    assert query_int(q(("offset", "12")), "offset") == 12
    refused(query_int, q(), "offset")
    refused(query_int, q(("offset", "1"), ("offset", "2")), "offset")
    refused(query_int, q(("offset", "-1")), "offset")
    assert query_int(q(("e", "-1")), "e", allow_negative=True, minimum=-1) == -1
    assert query_str(q(("spec", "latest")), "spec") == "latest"
    check_query_names(q(("offset", "1")), ("offset", "max_bytes"))
    refused(check_query_names, q(("ofset", "1")), ("offset",))
    refused(check_query_names, q(("offset", "1"), ("offset", "1")), ("offset",))
    refused(check_query_names, q(("x", "")), ())
