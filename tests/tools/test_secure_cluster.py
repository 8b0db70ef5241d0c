"""`ferry cluster up --secure`: tokens on every API, an encrypted Raft, and no secret anywhere visible.

One cluster for the whole check (it is the slow part): the tools work with the admin token from
FERRY_TOKEN_FILE; a missing or wrong token is 401 SASL_AUTHENTICATION_FAILED and the admin token
acting as a broker is 403 CLUSTER_AUTHORIZATION_FAILED, each changing nothing; a Raft peer without
the password gets nothing; and after `down`, no log, metric, describe output or error message of the
run holds any of the secrets.
"""
from __future__ import annotations

import asyncio
import glob
import json
import os
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from pysyncobj.utility import TcpUtility, UtilityException

from tools.client import Producer, TopicPartition, read_all
from tools.cluster import ROOT

pytestmark = pytest.mark.integration


def ferry(*args: str, token_file: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_TOKEN")}
    env["PYTHONPATH"] = ROOT
    if token_file:
        env["FERRY_TOKEN_FILE"] = token_file
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)


def call(url: str, body: Any = None, token: str | None = None) -> tuple[int, Any, dict[str, str]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw.startswith((b"{", b"[")) else raw.decode(), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), dict(e.headers)


def test_secure_cluster(tmp_path: Any) -> None:
    state_dir = str(tmp_path / "secure")
    up = ferry("cluster", "up", "--secure", "--brokers", "2", "--state-dir", state_dir, "--json")
    seen: list[str] = [up.stdout, up.stderr]
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(up.stdout)
        token_file = state["admin_token_file"]
        assert state["secure"] is True and stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        with open(os.path.join(state_dir, "broker-1.json"), encoding="utf-8") as f:
            security = json.load(f)["security"]
        with open(os.path.join(state_dir, "controllers", "controllers.json"), encoding="utf-8") as f:
            raft_password = json.load(f)["security"]["raft_password"]
        admin, internal = security["admin_token"], security["internal_token"]
        secrets = {"admin": admin, "internal": internal, "raft": raft_password}
        assert open(token_file, encoding="utf-8").read().strip() == admin
        controller, broker = state["controllers"][0]["url"], state["brokers"][0]["url"]
        server = state["bootstrap_server"]

        # The tools pass the admin token from FERRY_TOKEN_FILE; without it they are refused.
        created = ferry("topics", "--bootstrap-server", server, "--create", "--topic", "s", "--partitions", "2",
                        token_file=token_file)
        seen += [created.stdout, created.stderr]
        assert created.returncode == 0, created.stderr
        refused = ferry("topics", "--bootstrap-server", server, "--create", "--topic", "nope", "--partitions", "1")
        seen += [refused.stdout, refused.stderr]
        assert refused.returncode != 0 and "SASL_AUTHENTICATION_FAILED" in refused.stderr, refused.stderr
        described = ferry("topics", "--bootstrap-server", server, "--list", token_file=token_file)
        quorum = ferry("metadata-quorum", "--bootstrap-server", server, "describe", "--status", token_file=token_file)
        seen += [described.stdout, described.stderr, quorum.stdout, quorum.stderr]
        assert described.returncode == 0 and described.stdout.split() == ["s"], described.stdout + described.stderr
        assert quorum.returncode == 0, quorum.stderr

        # Clients with the admin token produce and read back.
        async def produce_and_read() -> list[bytes]:
            async with Producer(server, token=admin) as producer:
                futures = [await producer.send("s", f"v{i}".encode(), partition=i % 2) for i in range(20)]
                await producer.flush()
                [await f for f in futures]
            got = await read_all(server, [TopicPartition("s", 0), TopicPartition("s", 1)], token=admin)
            return sorted(r.value for recs in got.values() for r in recs)
        assert asyncio.run(produce_and_read()) == sorted(f"v{i}".encode() for i in range(20))

        # Refusals: 401 without or with a wrong token, 403 for the admin token acting as a broker.
        for token in (None, "not-the-token-000000", internal + "x"):
            for url, body in ((f"{controller}/v1/write/create_topics",
                               {"topics": [{"name": "forged", "num_partitions": 1}]}),
                              (f"{controller}/v1/read/describe_cluster", {}),
                              (f"{controller}/metrics", None),
                              (f"{broker}/v1/produce/s/0", {"records": [{"value": "forged"}]}),
                              (f"{broker}/v1/fetch/s/0?offset=0", None),
                              (f"{broker}/metrics", None)):
                status, answer, headers = call(url, body, token)
                seen.append(json.dumps(answer))
                assert status == 401 and answer["error"] == "SASL_AUTHENTICATION_FAILED", (url, status, answer)
                assert headers.get("WWW-Authenticate", "").startswith("Bearer")
        status, answer, _ = call(f"{controller}/v1/write/broker_heartbeat",
                                 {"broker_id": 1, "broker_epoch": 1, "metadata_offset": 0}, admin)
        seen.append(json.dumps(answer))
        assert status == 403 and answer["error"] == "CLUSTER_AUTHORIZATION_FAILED"
        status, answer, _ = call(f"{controller}/v1/write", {"ops": [{"op": "put_kv", "args": {"key": "k", "value": "v"}}]},
                                 admin)
        assert status == 403 and answer["error"] == "CLUSTER_AUTHORIZATION_FAILED"
        # Nothing refused changed anything: no topic, no key, no record.
        status, topics, _ = call(f"{controller}/v1/read/describe_topics", {}, admin)
        assert status == 200 and sorted(t["name"] for t in topics["reply"]["topics"]) == ["s"]
        status, kv, _ = call(f"{controller}/v1/read/get_kv", {"key": "k"}, admin)
        assert status == 200 and kv["reply"].get("value") is None, kv
        ends = [call(f"{b['url']}/v1/offsets/s/0?spec=latest", None, admin) for b in state["brokers"]]
        assert [answer.get("offset") for status, answer, _ in ends if status == 200] == [10], ends
        status, metrics, _ = call(f"{controller}/metrics", None, internal)
        status_b, broker_metrics, _ = call(f"{broker}/metrics", None, admin)
        assert status == status_b == 200
        status, cluster, _ = call(f"{controller}/v1/read/describe_cluster", {}, admin)
        seen += [metrics, broker_metrics, json.dumps(cluster)]

        # Raft: a peer without the password gets no answer; with it, pysyncobj's status.
        raft_address = json.load(open(os.path.join(state_dir, "controllers", "controllers.json")))["controllers"]["1"]["raft"]
        with pytest.raises(UtilityException):
            TcpUtility(password=None, timeout=3).executeCommand(raft_address, ["status"])
        with pytest.raises(UtilityException):
            TcpUtility(password="wrong-password-0000", timeout=3).executeCommand(raft_address, ["status"])
        assert TcpUtility(password=raft_password, timeout=5).executeCommand(raft_address, ["status"])["self"]
        status_cmd = ferry("cluster", "status", "--state-dir", state_dir)
        seen += [status_cmd.stdout, status_cmd.stderr]
        assert status_cmd.returncode == 0, status_cmd.stdout
    finally:
        down = ferry("cluster", "down", "--state-dir", state_dir)
    assert down.returncode == 0, down.stderr
    seen += [down.stdout, down.stderr]
    # No secret in any log of the run, in cluster.json, or in anything a command or the API printed.
    logs = [p for p in glob.glob(os.path.join(state_dir, "**", "*"), recursive=True)
            if p.endswith((".log", "cluster.json")) and os.path.isfile(p)]
    assert len(logs) >= 6  # s3, 3 controllers, 2 brokers, cluster.json
    texts = {p: open(p, encoding="utf-8", errors="replace").read() for p in logs}
    assert any("refused" in t for t in texts.values())  # the refusals were logged, without the tokens
    for name, secret in secrets.items():
        for path, text in texts.items():
            assert secret not in text, f"the {name} secret appears in {path}"
        for i, text in enumerate(seen):
            assert secret not in text, f"the {name} secret appears in output #{i}"
