"""The one config loader: types, bounds, nested settings, required keys and secrets."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from metadata_quorum.kernel.errors import ErrorCode, FerryError
from metadata_quorum.kernel.strict_config import (Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt,
                                           Secret, build)
from stream_storage.config import S3Config, s3_config_from_dict, storage_config_from_dict


@dataclass(frozen=True)
class Inner:
    size_bytes: PositiveInt = 1


@dataclass(frozen=True)
class Example:
    name: str
    count: NonNegativeInt = 0
    ratio: PositiveFloat = 1.0
    flag: bool = False
    mode: Literal["a", "b"] = "a"
    tags: tuple[str, ...] = ()
    maybe: int | None = None
    inner: Inner = field(default_factory=Inner)
    token: Secret | None = field(default=None, repr=False)


def refused(data: Any) -> str:
    with pytest.raises(FerryError) as err:
        build(Example, data, "example")
    assert err.value.error is ErrorCode.INVALID_CONFIG
    return err.value.message


def test_a_good_config_is_built_with_conversions() -> None:
    got = build(Example, {"name": "x", "ratio": 2, "tags": ["p", "q"], "maybe": None,
                          "inner": {"size_bytes": 5}, "token": "s3cr3t"}, "example")
    assert got == Example(name="x", ratio=2.0, tags=("p", "q"), inner=Inner(5), token="s3cr3t")
    assert isinstance(got.ratio, float) and "s3cr3t" not in repr(got)


@pytest.mark.parametrize("data, words", [
    ({}, "'name' is required"),
    ({"name": "x", "nmae": "y"}, "unknown example setting 'nmae'"),
    ({"name": "x", "count": -1}, "'count' must be >= 0, got -1"),
    ({"name": "x", "count": True}, "'count' must be an integer"),
    ({"name": "x", "count": 1.5}, "'count' must be an integer"),
    ({"name": "x", "ratio": 0}, "'ratio' must be > 0"),
    ({"name": "x", "flag": 1}, "'flag' must be true or false"),
    ({"name": "x", "mode": "c"}, "'mode' must be one of 'a', 'b'"),
    ({"name": "x", "tags": "p"}, "'tags' must be a list"),
    ({"name": "x", "tags": ["p", 3]}, "'tags[1]' must be a string"),
    ({"name": "x", "inner": {"size": 1}}, "unknown example setting 'inner.size'"),
    ({"name": "x", "inner": {"size_bytes": 0}}, "'inner.size_bytes' must be >= 1"),
    ({"name": "x", "inner": []}, "'inner' must be a JSON object"),
    ([], "the example config must be a JSON object"),
])
def test_bad_values_name_their_key(data: Any, words: str) -> None:
    assert words in refused(data)


def test_a_secret_is_never_echoed() -> None:
    message = refused({"name": "x", "token": 12345678})
    assert "'token' must be a string" in message and "12345678" not in message
    assert "must not be empty" in refused({"name": "x", "token": ""})
    config = s3_config_from_dict({"secret_access_key": "hunter2-secret"})
    assert "hunter2-secret" not in repr(config) and config.secret_access_key == "hunter2-secret"


def test_storage_configs_use_the_same_loader() -> None:
    assert s3_config_from_dict({"retry": {"max_attempts": 2}}).retry.max_attempts == 2
    assert s3_config_from_dict({}) == S3Config()
    with pytest.raises(FerryError, match="unknown s3 setting 'retry.attempts'"):
        s3_config_from_dict({"retry": {"attempts": 2}})
    with pytest.raises(FerryError, match="'wal_dir' is required"):
        storage_config_from_dict({})
    with pytest.raises(FerryError, match="'upload_interval_ms' must be >= 1"):
        storage_config_from_dict({"wal_dir": "/w", "upload_interval_ms": 0})
    with pytest.raises(FerryError, match="'compaction_interval_ms' must be >= 0, got -5"):
        storage_config_from_dict({"wal_dir": "/w", "compaction_interval_ms": -5})
    with pytest.raises(FerryError, match="'readahead_bytes' must be >= 1, got -1"):
        storage_config_from_dict({"wal_dir": "/w", "readahead_bytes": -1})
    assert storage_config_from_dict({"wal_dir": "/w", "compaction_interval_ms": 0}).compaction_interval_ms == 0


@dataclass(frozen=True)
class Shares:
    band: Fraction = 0.5
    floor: NonNegativeFloat = 0.0


@pytest.mark.parametrize("data, words", [
    ({"band": 1}, "'band' must be > 0 and < 1, got 1"),
    ({"band": 0.0}, "'band' must be > 0 and < 1, got 0.0"),
    ({"floor": -0.5}, "'floor' must be >= 0, got -0.5"),
    ({"floor": float("inf")}, "'floor' must be a finite number"),
    ({"band": float("nan")}, "'band' must be a finite number"),
])
def test_fractions_and_finite_floats(data: Any, words: str) -> None:
    with pytest.raises(FerryError) as err:
        build(Shares, data, "shares")
    assert err.value.error is ErrorCode.INVALID_CONFIG and words in err.value.message
    assert build(Shares, {"band": 0.999, "floor": 3}, "shares") == Shares(0.999, 3.0)
