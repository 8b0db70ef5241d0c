"""Controller config: defaults, checks with clear messages, and the process's answer to a bad file."""
from __future__ import annotations

import json
from typing import Any

import pytest

from metadata_quorum import server
from metadata_quorum.config import load_config, parse_config
from metadata_quorum.kernel.errors import ErrorCode, FerryError

PEERS = {"1": {"raft": "127.0.0.1:9001", "http": "127.0.0.1:8001"},
         "2": {"raft": "127.0.0.1:9002", "http": "127.0.0.1:8002"},
         "3": {"raft": "127.0.0.1:9003", "http": "127.0.0.1:8003"}}


def test_defaults_are_tuned_for_latency() -> None:
    config = parse_config({"controllers": PEERS, "data_dir": "/d"}, 2)
    assert config.raft.append_entries_use_batch is False
    assert (config.raft.raft_min_timeout_s, config.raft.raft_max_timeout_s) == (0.5, 0.8)
    assert config.raft.append_entries_batch_size_bytes >= 64 * 1024 * 1024  # never split an entry
    assert config.raft.connection_timeout_s == 3.5
    assert config.peer_raft_addresses() == ["127.0.0.1:9001", "127.0.0.1:9003"]
    assert config.node_data_dir == "/d/controller-2"
    assert config.node_id_for_raft("127.0.0.1:9003") == 3
    assert config.directory_id(1) == parse_config({"controllers": PEERS, "data_dir": "/d"}, 3).directory_id(1)
    assert len({config.directory_id(n) for n in (1, 2, 3)}) == 3


def test_a_single_controller_ticks_often() -> None:
    alone = parse_config({"controllers": {"1": PEERS["1"]}, "data_dir": "/d"}, 1)
    assert alone.raft.auto_tick_period_s == 0.005
    assert parse_config({"controllers": PEERS, "data_dir": "/d"}, 1).raft.auto_tick_period_s == 0.05


@pytest.mark.parametrize("data, node_id, words", [
    ({"data_dir": "/d"}, 1, "'controllers' must map"),
    ({"controllers": PEERS}, 1, "'data_dir' is required"),
    ({"controllers": PEERS, "data_dir": "/d"}, 4, "controller id 4 is not in"),
    ({"controllers": {"x": PEERS["1"]}, "data_dir": "/d"}, 1, "is not an integer"),
    ({"controllers": {"1": {"raft": "nohost"}}, "data_dir": "/d"}, 1, "needs both 'raft' and 'http'"),
    ({"controllers": {"1": {"raft": "h:1", "http": "h:port"}}, "data_dir": "/d"}, 1, "is not host:port"),
    ({"controllers": PEERS, "data_dir": "/d", "session_timeout_ms": 0}, 1, "'session_timeout_ms' must be >= 1"),
    ({"controllers": PEERS, "data_dir": "/d", "raft": {"speed": 1}}, 1, "unknown controller setting 'raft.speed'"),
    ({"controllers": PEERS, "data_dir": "/d", "sesion_timeout_ms": 9000}, 1, "unknown controller setting 'sesion_timeout_ms'"),
    ({"controllers": PEERS, "data_dir": "/d", "tick_interval_ms": "200"}, 1, "'tick_interval_ms' must be an integer"),
    ({"controllers": PEERS, "data_dir": "/d", "raft": {"raft_min_timeout_s": "fast"}}, 1, "'raft.raft_min_timeout_s' must be a number"),
    ({"controllers": PEERS, "data_dir": 7}, 1, "'data_dir' must be a string"),
    ({"controllers": {"1": dict(PEERS["1"], port=1)}, "data_dir": "/d"}, 1, "'controllers.1.port'"),
    ({"controllers": PEERS, "data_dir": "/d", "raft": {"append_entries_period_s": 0.2}}, 1, "must exceed 3"),
    # formerly accepted: a negative controller id, a port out of range
    ({"controllers": {"-1": PEERS["1"]}, "data_dir": "/d"}, -1, "'controllers.-1': a controller id must be >= 0"),
    ({"controllers": {"1": {"raft": "h:99999", "http": "h:8001"}}, "data_dir": "/d"}, 1,
     "'controllers.1.raft': 'h:99999' is not host:port with a port from 1 to 65535"),
    ({"controllers": {"1": {"raft": "h:9001", "http": "h:0"}}, "data_dir": "/d"}, 1, "'controllers.1.http'"),
])
def test_bad_configs_are_invalid_config_with_a_reason(data: dict[str, Any], node_id: int, words: str) -> None:
    with pytest.raises(FerryError) as err:
        parse_config(data, node_id)
    assert err.value.error is ErrorCode.INVALID_CONFIG
    assert words in err.value.message


def test_the_process_refuses_a_bad_file_with_a_message(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.json"
    path.write_text("{not json")
    assert server.main(["--id", "1", "--config", str(path)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert server.main(["--id", "1", "--config", str(tmp_path / "missing.json")]) == 2
    assert "cannot read controller config" in capsys.readouterr().err
    path.write_text(json.dumps({"controllers": PEERS, "data_dir": str(tmp_path)}))
    assert load_config(str(path), 3).me.http == "127.0.0.1:8003"


def test_a_leader_without_a_majority_steps_down_within_a_third_of_the_broker_session() -> None:
    """``ferry chaos run --net --seed 1 --duration 300``: the active controller cut from its followers
    (brokers still reaching it) kept leading for 4.3 s after the others elected a new leader (the
    5 s fallback); every broker kept sending it heartbeats that could not commit, and the new
    leader fenced all three brokers at once when their 4 s sessions ran out."""
    from metadata_quorum.raft_process import leader_fallback_s

    def fallback(session_timeout_ms: int, **raft: Any) -> float:
        return leader_fallback_s(parse_config({"controllers": PEERS, "data_dir": "/d", "raft": raft,
                                               "session_timeout_ms": session_timeout_ms}, 1))

    assert fallback(4000) == pytest.approx(4 / 3)  # the local clusters' session: 1.33 s, not 5 s
    assert fallback(9000) == pytest.approx(3.0)
    assert fallback(30_000) == 5.0  # the setting, when the session leaves room for it
    assert fallback(30_000, leader_fallback_timeout_s=2.0) == 2.0
    assert fallback(1000) == 0.8  # never below the longest election timeout
    for session_ms in (1000, 4000, 9000, 30_000):  # the brokers always keep most of their session
        assert fallback(session_ms) <= max(0.8, session_ms / 3000)
