"""The checks of Kafka's command-line tools (see :mod:`tools.peer.checks` for how they are judged).

Each asserts what Kafka's own broker would make the tool print or do. ``QUICK`` is the subset
``make test`` runs (a few JVM starts each); ``ALL`` is the table of ``make conformance``.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess

from tools.peer.checks import (Check, Peer, expect, parse_api_versions, parse_table, parse_topic_describe,
                               wait_until)
from tools.peer.kafka_tools import properties_file
from tools.peer.verifiable import check_read_back, consumer_events, producer_events


def api_versions(peer: Peer) -> str:
    run = peer.ok("kafka-broker-api-versions")
    for b in peer.broker_ids:
        expect(f"(id: {b} " in run.stdout, f"broker {b} not listed", run)
    apis = parse_api_versions(run.stdout)
    for api in ("Produce", "Fetch", "Metadata", "CreateTopics", "JoinGroup"):
        expect("usable" in apis.get(api, ""), f"{api} not usable", run)
    return f"{sum('usable' in v for v in apis.values())} APIs usable"


def topics_lifecycle(peer: Peer) -> str:
    """--create (with a config), --list, --describe, --alter --partitions, --delete; thorough: a
    second --create and a shrink refused."""
    topic = peer.name("topics")
    peer.ok("kafka-topics", "--create", "--topic", topic, "--partitions", "3", "--replication-factor", "1",
            "--config", "retention.ms=86400000")
    if peer.thorough:
        again = peer.tool("kafka-topics", "--create", "--topic", topic, "--partitions", "3")
        expect(not again.ok and "already exists" in again.output, "a second --create did not fail as TopicExists",
               again)
    listed = peer.ok("kafka-topics", "--list")
    expect(topic in listed.stdout.split(), "--list lacks the topic", listed)
    run = peer.ok("kafka-topics", "--describe", "--topic", topic)
    d = parse_topic_describe(run.stdout, topic)
    expect(d.partition_count == 3 and sorted(d.leaders) == [0, 1, 2], "--describe: not 3 partitions", run)
    expect(all(leader in peer.broker_ids for leader in d.leaders.values()), "--describe: a partition without leader", run)
    expect("retention.ms=86400000" in d.configs, "--describe: the topic's config is missing", run)
    peer.ok("kafka-topics", "--alter", "--topic", topic, "--partitions", "5")
    if peer.thorough:
        shrink = peer.tool("kafka-topics", "--alter", "--topic", topic, "--partitions", "2")
        expect(not shrink.ok and "InvalidPartitionsException" in shrink.output, "shrinking was not refused", shrink)
    run = peer.ok("kafka-topics", "--describe", "--topic", topic)
    d = parse_topic_describe(run.stdout, topic)
    expect(d.partition_count == 5 and len(d.leaders) == 5, "--alter --partitions 5 not described", run)
    peer.ok("kafka-topics", "--delete", "--topic", topic)
    listed = peer.ok("kafka-topics", "--list")
    expect(topic not in listed.stdout.split(), "--list still has the deleted topic", listed)
    refused = ", a second create and a shrink refused" if peer.thorough else ""
    return f"created, listed, described, 3 -> 5 partitions, deleted{refused}"


def console_round_trip(peer: Peer) -> str:
    """Keyed lines through kafka-console-producer, read back by kafka-console-consumer in a group."""
    topic, group = peer.name("console"), peer.name("console-group")
    peer.create_topic(topic, 3)
    lines = [f"k{i % 5}:v{i}" for i in range(60)]
    peer.ok("kafka-console-producer", "--topic", topic, "--reader-property", "parse.key=true", "--reader-property",
            "key.separator=:", input_text="\n".join(lines) + "\n")
    run = peer.ok("kafka-console-consumer", "--topic", topic, "--group", group, "--from-beginning",
                  "--max-messages", str(len(lines)), "--timeout-ms", "30000", "--formatter-property", "print.key=true",
                  "--formatter-property", "print.partition=true", "--formatter-property", "key.separator=:")
    read = [m.groups() for m in re.finditer(r"^Partition:(\d+):(k\d):(v\d+)$", run.stdout, re.M)]
    expect(len(read) == len(lines), f"read {len(read)} of {len(lines)} lines", run)
    expect(sorted(f"{k}:{v}" for _, k, v in read) == sorted(lines), "read other lines than produced", run)
    for key in {k for _, k, _ in read}:
        of_key = [(p, int(v[1:])) for p, k, v in read if k == key]
        expect(len({p for p, _ in of_key}) == 1, f"key {key} in several partitions", run)
        expect([v for _, v in of_key] == sorted(v for _, v in of_key), f"key {key} out of order", run)
    committed = peer.committed(group, topic, 3)
    expect(sum(committed.values()) == len(lines), f"the group committed {committed}, not the {len(lines)} read")
    return f"{len(lines)} keyed lines produced and read back in key order; the group committed them"


def group_reset_offsets(peer: Peer) -> str:
    """--describe of an inactive group, --reset-offsets --to-earliest --execute; thorough: --dry-run,
    --to-offset on one partition, --shift-by."""
    topic, group = peer.name("reset"), peer.name("reset-group")
    peer.create_topic(topic, 2)
    for p in (0, 1):
        peer.produce(topic, [b"r%d" % i for i in range(20)], partition=p)
    peer.commit(group, topic, {0: 15, 1: 20})
    run = peer.ok("kafka-consumer-groups", "--describe", "--group", group)
    rows = {r["PARTITION"]: r for r in parse_table(run.stdout, "GROUP") if r.get("TOPIC") == topic}
    expect({p: (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for p, r in rows.items()}
           == {"0": ("15", "20", "5"), "1": ("20", "20", "0")}, "--describe: wrong offsets or lag", run)
    if peer.thorough:
        dry = peer.ok("kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                      "--dry-run")
        expect(sorted(r["NEW-OFFSET"] for r in parse_table(dry.stdout, "GROUP")) == ["0", "0"], "--dry-run plan", dry)
        expect(peer.committed(group, topic, 2) == {0: 15, 1: 20}, "--dry-run changed the committed offsets")
    peer.ok("kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    expect(peer.committed(group, topic, 2) == {0: 0, 1: 0}, "--to-earliest --execute not committed")
    if not peer.thorough:
        return "described offsets and lag; reset to earliest"
    peer.ok("kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-offset", "7",
            "--execute")
    peer.ok("kafka-consumer-groups", "--reset-offsets", "--group", group, "--topic", topic, "--shift-by", "3",
            "--execute")
    got = peer.committed(group, topic, 2)
    expect(got == {0: 3, 1: 10}, f"--to-offset 7 on partition 1 then --shift-by 3 gave {got}, not {{0: 3, 1: 10}}")
    return "described offsets and lag; reset to earliest (dry run, execute), to an offset, shifted"


def group_delete_offsets(peer: Peer) -> str:
    topic, other, group = peer.name("delofs"), peer.name("delofs-kept"), peer.name("delofs-group")
    peer.create_topic(topic, 2)
    peer.create_topic(other, 1)
    peer.commit(group, topic, {0: 0, 1: 0})
    peer.commit(group, other, {0: 0})
    run = peer.ok("kafka-consumer-groups", "--delete-offsets", "--group", group, "--topic", topic)
    expect("Error" not in run.output, "--delete-offsets reported an error", run)
    expect(peer.committed(group, topic, 2) == {0: -1001, 1: -1001}, "the topic's offsets are still committed", run)
    expect(peer.committed(group, other, 1) == {0: 0}, "the other topic's offset was deleted too", run)
    return "deleted one topic's committed offsets, the other's kept"


def group_active_describe(peer: Peer) -> str:
    """A live kafka-console-consumer member: --describe --state/--members/offsets, a refused reset, --delete."""
    topic, group = peer.name("live"), peer.name("live-group")
    peer.create_topic(topic, 2)
    peer.produce(topic, [b"x%d" % i for i in range(10)], partition=0)
    member = peer.tools.start("kafka-console-consumer", "--bootstrap-server", peer.bootstrap, "--topic", topic,
                              "--group", group, "--from-beginning", "--command-property", "auto.commit.interval.ms=200",
                              stdout=subprocess.DEVNULL)
    try:
        def stable() -> bool:
            run = peer.tool("kafka-consumer-groups", "--describe", "--group", group, "--state")
            return any(r.get("STATE") == "Stable" and r.get("#MEMBERS") == "1" for r in parse_table(run.stdout, "GROUP"))
        wait_until(stable, 40, "the group is Stable with one member", interval_s=0.5)
        run = peer.ok("kafka-consumer-groups", "--describe", "--group", group, "--members")
        (m,) = parse_table(run.stdout, "GROUP")
        expect(m["HOST"] == "/127.0.0.1" and m["CLIENT-ID"].startswith("console-consumer") and m["#PARTITIONS"] == "2",
               "--members: host, client id or partitions", run)
        run = peer.ok("kafka-consumer-groups", "--describe", "--group", group)
        rows = parse_table(run.stdout, "GROUP")
        expect(len(rows) == 2 and all(r["CONSUMER-ID"] == m["CONSUMER-ID"] for r in rows),
               "--describe: the partitions are not the member's", run)
        refused = peer.tool("kafka-consumer-groups", "--reset-offsets", "--group", group, "--all-topics",
                            "--to-earliest", "--execute")
        expect("can only be reset if the group" in refused.output, "a reset of an active group was not refused",
               refused)
        groups = peer.ok("kafka-groups", "--list")
        listed = {r["GROUP"]: r for r in parse_table(groups.stdout, "GROUP")}
        expect(listed.get(group, {}).get("TYPE") == "Classic", "kafka-groups --list: not a Classic group", groups)
    finally:
        member.send_signal(signal.SIGTERM)
        try:
            member.wait(20)
        except subprocess.TimeoutExpired:
            member.kill()
            member.wait()
    run = peer.ok("kafka-consumer-groups", "--delete", "--group", group)
    expect("successful" in run.stdout, "--delete did not succeed", run)
    listed_after = peer.ok("kafka-consumer-groups", "--list")
    expect(group not in listed_after.stdout.split(), "--list still has the deleted group", listed_after)
    return "Stable, 1 member on /127.0.0.1 holding both partitions; reset refused; listed Classic; deleted"


def reassign(peer: Peer) -> str:
    """--generate a plan onto two brokers, --execute it, --verify until complete, --describe the result."""
    topic = peer.name("reassign")
    peer.create_topic(topic, 4)
    peer.produce(topic, [b"m%d" % i for i in range(40)])
    targets = peer.broker_ids[:2]
    topics_file = peer.workdir / f"{topic}-topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    gen = peer.ok("kafka-reassign-partitions", "--generate", "--topics-to-move-json-file", str(topics_file),
                  "--broker-list", ",".join(map(str, targets)))
    plan_text = gen.stdout.split("Proposed partition reassignment configuration")[-1].strip()
    plan = json.loads(plan_text)
    wanted = {p["partition"]: tuple(p["replicas"]) for p in plan["partitions"]}
    expect(sorted(wanted) == [0, 1, 2, 3] and all(set(r) <= set(targets) for r in wanted.values()),
           "--generate: the plan leaves the broker list", gen)
    plan_file = peer.workdir / f"{topic}-plan.json"
    plan_file.write_text(plan_text)
    run = peer.ok("kafka-reassign-partitions", "--execute", "--reassignment-json-file", str(plan_file))
    expect("Successfully started partition reassignment" in run.stdout, "--execute", run)

    def complete() -> bool:
        v = peer.tool("kafka-reassign-partitions", "--verify", "--reassignment-json-file", str(plan_file))
        return v.ok and v.stdout.count("is completed") == 4
    wait_until(complete, 30, "--verify says every reassignment is completed", interval_s=0.5)
    run = peer.ok("kafka-topics", "--describe", "--topic", topic)
    d = parse_topic_describe(run.stdout, topic)
    expect(d.replicas == {p: r for p, r in wanted.items()} and all(d.leaders[p] == r[0] for p, r in wanted.items()),
           "--describe after the moves: not the plan's replicas and leaders", run)
    return f"4 partitions moved onto brokers {','.join(map(str, targets))}, verified complete"


def configs_topic(peer: Peer) -> str:
    """--alter --add-config and --describe of a topic; thorough: --delete-config and a bad value refused."""
    topic = peer.name("configs")
    peer.create_topic(topic, 1)
    entity = ("--entity-type", "topics", "--entity-name", topic)
    peer.ok("kafka-configs", "--alter", *entity, "--add-config", "retention.ms=3600000,max.message.bytes=200000")
    run = peer.ok("kafka-configs", "--describe", *entity)
    expect("retention.ms=3600000" in run.stdout and "max.message.bytes=200000" in run.stdout, "--describe", run)
    if not peer.thorough:
        return "added two configs, described"
    peer.ok("kafka-configs", "--alter", *entity, "--delete-config", "retention.ms")
    run = peer.ok("kafka-configs", "--describe", *entity)
    expect("retention.ms=" not in run.stdout and "max.message.bytes=200000" in run.stdout,
           "--delete-config retention.ms", run)
    bad = peer.tool("kafka-configs", "--alter", *entity, "--add-config", "retention.ms=soon")
    expect(not bad.ok and "InvalidConfigurationException" in bad.output, "a bad value was not refused", bad)
    return "added two, deleted one, a bad value refused"


def configs_broker(peer: Peer) -> str:
    """A broker's dynamic config (a replication throttle): --alter and --describe; a config the broker
    applies at start-up refused as Kafka refuses a non-dynamic one; thorough: the cluster default,
    --delete-config."""
    b = str(peer.broker_ids[0])
    entity = ("--entity-type", "brokers", "--entity-name", b)
    peer.ok("kafka-configs", "--alter", *entity, "--add-config", "leader.replication.throttled.rate=7200000")
    run = peer.ok("kafka-configs", "--describe", *entity)
    expect("leader.replication.throttled.rate=7200000" in run.stdout and "DYNAMIC_BROKER_CONFIG" in run.stdout,
           "--describe", run)
    fixed = peer.tool("kafka-configs", "--alter", *entity, "--add-config", "log.retention.ms=7200000")
    expect(not fixed.ok and "InvalidRequestException" in fixed.output
           and "Cannot update these configs dynamically: [log.retention.ms]" in fixed.output,
           "a static broker config was not refused as Kafka refuses a non-dynamic one", fixed)
    run = peer.ok("kafka-configs", "--describe", *entity)
    expect("log.retention.ms=7200000" not in run.stdout, "the refused config was stored", run)
    if not peer.thorough:
        return f"broker {b}: a throttle added, described; log.retention.ms refused"
    peer.ok("kafka-configs", "--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
            "follower.replication.throttled.rate=1000000000")
    run = peer.ok("kafka-configs", "--describe", "--entity-type", "brokers", "--entity-default")
    expect("follower.replication.throttled.rate=1000000000" in run.stdout
           and "DYNAMIC_DEFAULT_BROKER_CONFIG" in run.stdout, "--describe --entity-default", run)
    peer.ok("kafka-configs", "--alter", *entity, "--delete-config", "leader.replication.throttled.rate")
    peer.ok("kafka-configs", "--alter", "--entity-type", "brokers", "--entity-default", "--delete-config",
            "follower.replication.throttled.rate")
    run = peer.ok("kafka-configs", "--describe", *entity)
    expect("leader.replication.throttled.rate=" not in run.stdout, "--delete-config on the broker", run)
    return f"broker {b} and the cluster default altered, described, deleted; log.retention.ms refused"


def configs_users(peer: Peer) -> str:
    """SCRAM credentials (KIP-554): --alter --add-config SCRAM-SHA-256, then SCRAM-SHA-512, --describe,
    --delete-config. Both mechanisms in one --add-config are one request naming the user twice, which
    Kafka 4.4's controller refuses (DUPLICATE_RESOURCE), and so does Ferry's."""
    user = peer.name("scram-user")
    entity = ("--entity-type", "users", "--entity-name", user)
    peer.ok("kafka-configs", "--alter", *entity, "--add-config", "SCRAM-SHA-256=[iterations=8192,password=secret]")
    peer.ok("kafka-configs", "--alter", *entity, "--add-config", "SCRAM-SHA-512=[password=secret]")
    run = peer.ok("kafka-configs", "--describe", *entity)
    expect(f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192, "
           "SCRAM-SHA-512=iterations=4096" in run.stdout, "--describe: not both credentials", run)
    both = peer.tool("kafka-configs", "--alter", *entity, "--add-config",
                     "SCRAM-SHA-256=[password=a],SCRAM-SHA-512=[password=b]")
    expect(not both.ok and "DuplicateResourceException" in both.output, "one user twice was not refused", both)
    peer.ok("kafka-configs", "--alter", *entity, "--delete-config", "SCRAM-SHA-512")
    run = peer.ok("kafka-configs", "--describe", *entity)
    expect("SCRAM-SHA-256=iterations=8192" in run.stdout and "SCRAM-SHA-512" not in run.stdout,
           "--delete-config SCRAM-SHA-512", run)
    return "SCRAM-SHA-256 and -512 added, described, one deleted; both in one request refused as Kafka does"


def configs_group(peer: Peer) -> str:
    """A consumer group's configs (KIP-848) before the group exists: --alter --add-config and
    --describe, a value outside group.consumer.max.session.timeout.ms refused; thorough:
    --delete-config and --describe --all showing the default."""
    group = peer.name("configs-group")
    entity = ("--entity-type", "groups", "--entity-name", group)
    peer.ok("kafka-configs", "--alter", *entity, "--add-config",
            "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000")
    run = peer.ok("kafka-configs", "--describe", *entity)
    expect("consumer.session.timeout.ms=50000" in run.stdout and "consumer.heartbeat.interval.ms=6000" in run.stdout,
           "--describe", run)
    bad = peer.tool("kafka-configs", "--alter", *entity, "--add-config", "consumer.session.timeout.ms=90000")
    expect(not bad.ok and "InvalidConfigurationException" in bad.output, "a value above the maximum was not refused",
           bad)
    if not peer.thorough:
        return "added two configs, described, a value out of bounds refused"
    peer.ok("kafka-configs", "--alter", *entity, "--delete-config", "consumer.session.timeout.ms")
    run = peer.ok("kafka-configs", "--describe", "--all", *entity)
    expect("consumer.session.timeout.ms=45000" in run.stdout and "consumer.heartbeat.interval.ms=6000" in run.stdout,
           "--delete-config, then --describe --all", run)
    return "added two, one out of bounds refused, deleted one, the default described"


def perf_tests(peer: Peer) -> str:
    topic, n = peer.name("perf"), 20000
    peer.create_topic(topic, 3)
    run = peer.ok("kafka-producer-perf-test", "--topic", topic, "--num-records", str(n), "--record-size", "100",
                  "--throughput", "-1", "--command-property", "acks=all", short_lived=False)
    expect(f"{n} records sent" in run.stdout, "the producer perf test did not send them all", run)
    produced = run.stdout.strip().splitlines()[-1]
    run = peer.ok("kafka-get-offsets", "--topic", topic)
    ends = {int(p): int(o) for p, o in re.findall(rf"^{re.escape(topic)}:(\d+):(\d+)$", run.stdout, re.M)}
    expect(sum(ends.values()) == n and len(ends) == 3, f"the log ends sum to {sum(ends.values())}", run)
    run = peer.ok("kafka-consumer-perf-test", "--topic", topic, "--num-records", str(n), "--timeout", "30000",
                  short_lived=False)
    fields = run.stdout.strip().splitlines()[-1].split(", ")
    expect(len(fields) >= 5 and fields[4] == str(n), "the consumer perf test did not read them all", run)
    return f"{produced.split(',')[1].strip()}; consumed {n} at {fields[5]} records/s"


def verifiable_round_trip(peer: Peer) -> str:
    topic, n = peer.name("verifiable"), 1000
    peer.create_topic(topic, 3)
    config = properties_file(peer.workdir / f"{topic}.properties",
                             {"enable.idempotence": "true", "acks": "all", "retries": "2147483647"})
    produced = peer.ok("kafka-verifiable-producer", "--topic", topic, "--max-messages", str(n), "--repeating-keys",
                       "30", "--command-config", str(config))
    p = producer_events(produced.stdout.splitlines())
    expect(len(p.acks) == n and not p.errors, f"{len(p.acks)} acked, errors {p.errors[:2]}", produced)
    consumed = peer.ok("kafka-verifiable-consumer", "--topic", topic, "--group-id", peer.name("verifiable-group"),
                       "--max-messages", str(n), "--verbose", "--reset-policy", "earliest")
    c = consumer_events(consumed.stdout.splitlines())
    result = check_read_back(p.acks, c.records)
    expect(result.exactly_once and result.read_back == n, f"{result.summary()} {result.examples}")
    return result.summary()


def get_offsets_and_delete_records(peer: Peer) -> str:
    topic = peer.name("offsets")
    peer.create_topic(topic, 2)
    peer.produce(topic, [b"o%d" % i for i in range(12)], partition=0)
    spec = peer.workdir / f"{topic}-delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "offset": 5}]}))
    run = peer.ok("kafka-delete-records", "--offset-json-file", str(spec))
    expect(f"partition: {topic}-0\tlow_watermark: 5" in run.stdout, "the low watermark is not 5", run)
    run = peer.ok("kafka-get-offsets", "--topic", topic, "--time", "-2")
    expect(f"{topic}:0:5" in run.stdout and f"{topic}:1:0" in run.stdout, "earliest offsets", run)
    run = peer.ok("kafka-get-offsets", "--topic", topic, "--partitions", "0", "--time", "-4")  # earliest local
    expect(f"{topic}:0:5" in run.stdout, "the earliest local offset (-4) is not the log start", run)
    run = peer.ok("kafka-get-offsets", "--topic", topic, "--partitions", "0", "--time", "-3")  # max timestamp
    found = re.findall(rf"^{re.escape(topic)}:0:(\d+)$", run.stdout, re.M)
    expect(len(found) == 1 and 5 <= int(found[0]) < 12, "the max-timestamp offset (-3) is not a record left", run)
    return f"records before offset 5 deleted; earliest offsets 5 and 0; earliest local 5; max timestamp at {found[0]}"


def log_dirs(peer: Peer) -> str:
    run = peer.ok("kafka-log-dirs", "--describe")
    report = json.loads(run.stdout.strip().splitlines()[-1])
    ids = sorted(b["broker"] for b in report["brokers"])
    expect(ids == sorted(peer.broker_ids) and all(b["logDirs"] for b in report["brokers"]), "brokers or dirs", run)
    return f"{len(ids)} brokers' log dirs"


def leader_election(peer: Peer) -> str:
    run = peer.ok("kafka-leader-election", "--election-type", "preferred", "--all-topic-partitions")
    return "preferred election over every partition: " + (run.stdout.strip().splitlines() or ["nothing to elect"])[0]


def e2e_latency(peer: Peer) -> str:
    topic = peer.name("e2e")
    peer.create_topic(topic, 1)
    run = peer.ok("kafka-e2e-latency", "--topic", topic, "--num-records", "200", "--producer-acks", "all",
                  "--record-size", "100")
    m = re.search(r"Avg latency: ([\d.]+) ms", run.stdout)
    expect(m is not None, "no average latency", run)
    assert m is not None
    return f"200 records, average {float(m.group(1)):.1f} ms"


def metadata_quorum(peer: Peer) -> str:
    """--status and --replication: the Raft leader among three voters, its term, the commit index, and
    the brokers as observers, each with a known log end offset."""
    run = peer.ok("kafka-metadata-quorum", "describe", "--status")
    status = dict(line.split(":", 1) for line in run.stdout.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in status.items()}
    voters = json.loads(fields.get("CurrentVoters", "[]"))
    observers = json.loads(fields.get("CurrentObservers", "[]"))
    leader, epoch, hw = int(fields.get("LeaderId", -1)), int(fields.get("LeaderEpoch", -1)), \
        int(fields.get("HighWatermark", -1))
    expect(len(voters) == 3 and leader in [v["id"] for v in voters], "the leader is not one of three voters", run)
    expect(epoch >= 1 and hw > 0, "no leader epoch or high watermark", run)
    expect(sorted(o["id"] for o in observers) == sorted(peer.broker_ids), "the observers are not the brokers", run)
    rep = peer.ok("kafka-metadata-quorum", "describe", "--replication")
    rows = [line.split() for line in rep.stdout.splitlines()[1:] if line.strip()]
    statuses = sorted(r[-1] for r in rows)
    expect(statuses == sorted(["Leader", "Follower", "Follower", *["Observer"] * len(peer.broker_ids)]),
           "--replication: not a leader, two followers and the brokers", rep)
    expect(all(int(r[2]) >= 0 for r in rows if r[-1] in ("Leader", "Observer")),
           "--replication: an unknown log end offset", rep)
    return f"leader {leader}, epoch {epoch}, high watermark {hw}, {len(observers)} observers; --replication " \
           f"{len(rows)} rows"


def features(peer: Peer) -> str:
    """Ferry's brokers report no feature levels (ApiVersions' supported and finalized features are
    empty: there is no KRaft metadata.version to finalize), so the tool lists none."""
    run = peer.ok("kafka-features", "describe")
    listed = [line for line in run.stdout.splitlines() if line.startswith("Feature:")]
    return f"{len(listed)} features listed" if listed else "runs; no feature levels reported, none listed"


def acls(peer: Peer) -> str:
    """The cluster runs the authorizer as librdkafka's test brokers do (AUTHORIZER_ON: no ACL on a
    resource allows everyone). As librdkafka's test 0109: a DENY of ``User:*`` All on a topic, added
    with kafka-acls, makes a client's produce to it fail with TOPIC_AUTHORIZATION_FAILED and append
    nothing; --list shows it, --remove takes it away, and the same produce then works."""
    from confluent_kafka import KafkaError, Producer

    topic = peer.name("acl")
    peer.create_topic(topic, 1)
    peer.ok("kafka-acls", "--add", "--deny-principal", "User:*", "--operation", "All", "--deny-host", "*",
            "--topic", topic)
    listed = peer.ok("kafka-acls", "--list", "--topic", topic)
    expect("principal=User:*, host=*, operation=ALL, permissionType=DENY" in listed.stdout,
           "--list does not show the DENY", listed)
    producer = Producer({"bootstrap.servers": peer.bootstrap, "message.timeout.ms": 10000})
    errors: list[KafkaError] = []
    producer.produce(topic, b"refused", on_delivery=lambda err, _m: errors.append(err) if err else None)
    producer.flush(20)
    expect([e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED],
           f"a produce to the denied topic got {errors}, not TOPIC_AUTHORIZATION_FAILED")
    peer.ok("kafka-acls", "--remove", "--force", "--deny-principal", "User:*", "--operation", "All",
            "--deny-host", "*", "--topic", topic)
    listed = peer.ok("kafka-acls", "--list", "--topic", topic)
    expect("DENY" not in listed.stdout, "--list still shows the removed DENY", listed)
    offsets = peer.log_end_offset(topic)
    expect(offsets == 0, f"the refused produce appended: the log ends at {offsets}")
    peer.produce(topic, [b"allowed"])
    expect(peer.log_end_offset(topic) == 1, "the produce after --remove did not append one record")
    return "DENY User:* added, listed; produce refused (TOPIC_AUTHORIZATION_FAILED, nothing appended); removed"


def consumer_protocol(peer: Peer) -> str:
    """The new consumer group protocol (KIP-848) of the Java consumer."""
    topic = peer.name("kip848")
    peer.create_topic(topic, 1)
    peer.produce(topic, [b"n%d" % i for i in range(5)])
    run = peer.ok("kafka-console-consumer", "--topic", topic, "--group", peer.name("kip848-group"),
                  "--from-beginning", "--max-messages", "5", "--timeout-ms", "20000",
                  "--command-property", "group.protocol=consumer")
    expect(run.stdout.split() == [f"n{i}" for i in range(5)], "not the 5 records", run)
    return "5 records read with group.protocol=consumer"


QUICK: tuple[Check, ...] = (
    Check("kafka-topics", "--create/--list/--describe/--alter --partitions/--delete", topics_lifecycle),
    Check("kafka-console-producer/consumer", "keyed lines, a group", console_round_trip),
    Check("kafka-consumer-groups", "--describe, --reset-offsets --dry-run/--execute", group_reset_offsets),
    Check("kafka-consumer-groups", "--delete-offsets", group_delete_offsets, needs=("OffsetDelete",)),
    Check("kafka-reassign-partitions", "--generate/--execute/--verify", reassign),
    Check("kafka-configs", "topic --alter/--describe", configs_topic),
    Check("kafka-configs", "broker --alter/--describe, a static config refused", configs_broker),
    Check("kafka-configs", "group --alter/--describe (KIP-848)", configs_group),
    Check("kafka-producer/consumer-perf-test", "20,000 records", perf_tests),
    Check("kafka-verifiable-producer/consumer", "idempotent, exactly once", verifiable_round_trip),
)

ALL: tuple[Check, ...] = (
    Check("kafka-broker-api-versions", "every broker", api_versions),
    *QUICK,
    Check("kafka-consumer-groups", "an active member: --describe --state/--members, --delete", group_active_describe),
    Check("kafka-get-offsets/kafka-delete-records", "delete, earliest offsets", get_offsets_and_delete_records),
    Check("kafka-log-dirs", "--describe", log_dirs),
    Check("kafka-leader-election", "preferred, all partitions", leader_election),
    Check("kafka-e2e-latency", "200 records", e2e_latency),
    Check("kafka-console-consumer", "group.protocol=consumer (KIP-848)", consumer_protocol,
          needs=("ConsumerGroupHeartbeat",)),
    Check("kafka-metadata-quorum", "describe --status / --replication", metadata_quorum,
          needs=("DescribeQuorum",)),
    Check("kafka-configs", "users SCRAM-SHA-256/512 --alter/--describe/--delete-config", configs_users,
          needs=("DescribeUserScramCredentials", "AlterUserScramCredentials", "DescribeClientQuotas")),
    Check("kafka-features", "describe", features),
    Check("kafka-acls", "--add/--list/--remove, a denied produce", acls, needs=("DescribeAcls",)),
)
