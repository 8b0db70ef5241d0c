"""``storage.wal`` in a broker config: strict, and kept apart from what the garbage collector owns."""
from __future__ import annotations

import pytest

from broker.config import config_from_dict
from metadata_quorum.kernel.errors import ErrorCode, FerryError
from stream_storage.config import storage_config_from_dict

BASE = {"broker_id": 1, "controllers": ["127.0.0.1:9001"], "log_dirs": ["/tmp/ferry-b1"]}


def test_wal_mode_s3_is_accepted_with_its_thresholds() -> None:
    cfg = config_from_dict(dict(BASE, storage={"wal": {"mode": "s3", "object_interval_ms": 10}}))
    storage = cfg.storage  # parsed once, at load
    assert (storage.wal.mode, storage.wal.object_interval_ms, storage.wal.object_bytes) == ("s3", 10, 8 * 1024 * 1024)
    assert storage_config_from_dict({"wal_dir": "/x"}).wal.mode == "local"


@pytest.mark.parametrize("wal, named", [
    ({"mode": "disk"}, "storage.wal.mode"),
    ({"object_interval_ms": -1}, "storage.wal.object_interval_ms"),
    ({"object_bytes": 0}, "storage.wal.object_bytes"),
    ({"batch_ms": 5}, "storage.wal.batch_ms"),
    ({"key_prefix": "streams/wal"}, "storage.wal.key_prefix"),
    ({"key_prefix": ""}, "storage.wal.key_prefix"),
])
def test_bad_wal_settings_are_invalid_config_naming_the_setting(wal: dict, named: str) -> None:
    with pytest.raises(FerryError) as err:
        config_from_dict(dict(BASE, storage={"wal": wal}))
    assert err.value.error == ErrorCode.INVALID_CONFIG and named in err.value.message
