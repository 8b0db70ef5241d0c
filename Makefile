# Every install step lives here: `make test` and `make demo` work on a fresh clone.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON ?= $(abspath $(PY))

.PHONY: install test test-fast chaos demo perf perf-s3 soak soak-net clean kafka-jars spark-kafka-jars spark-kafka-kills conformance streams-jars browser

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Apache Kafka's own jars (tools, Java client, broker), pinned in tools/peer/kafka-pom.xml, copied
# from Maven Central by Maven, which checks every checksum (-C); once fetched, `make` finds the
# stamp and does nothing. Without mvn it says so and the tests that need the jars are skipped.
KAFKA_VERSION := 4.4.0
KAFKA_JARS := .cache/kafka-$(KAFKA_VERSION)
KAFKA_JARS_STAMP := $(KAFKA_JARS)/.complete

$(KAFKA_JARS_STAMP): tools/peer/kafka-pom.xml
	@if command -v mvn >/dev/null 2>&1; then \
		rm -rf $(KAFKA_JARS) && \
		mvn -q -B -C -Dstyle.color=never -f tools/peer/kafka-pom.xml dependency:copy-dependencies -DincludeScope=runtime \
			-DoutputDirectory=$(abspath $(KAFKA_JARS)) && touch $@; \
	else echo "kafka-jars: mvn not found: Kafka $(KAFKA_VERSION)'s jars not fetched, the tests that run Kafka's tools are skipped"; fi

kafka-jars: $(KAFKA_JARS_STAMP)

# Spark's own Kafka source and sink (tools/peer/spark_kafka.py): the jars beyond pyspark's, from
# Maven Central, once, checksums checked; the version is SPARK_KAFKA_VERSION there and in the pom
SPARK_KAFKA_JARS := .cache/spark-kafka-4.2.0
SPARK_KAFKA_JARS_STAMP := $(SPARK_KAFKA_JARS)/.copied

$(SPARK_KAFKA_JARS_STAMP): tools/peer/spark-kafka-pom.xml
	mvn -q -B -C -Dstyle.color=never -f tools/peer/spark-kafka-pom.xml dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(abspath $(SPARK_KAFKA_JARS))
	touch $@

spark-kafka-jars: $(SPARK_KAFKA_JARS_STAMP)

# Kafka Streams' own word count example (tools/peer/streams_wordcount.py), pinned in
# tools/peer/streams-pom.xml, from Maven Central, once, checksums checked
STREAMS_JARS := .cache/kafka-streams-4.3.1
STREAMS_JARS_STAMP := $(STREAMS_JARS)/.copied

$(STREAMS_JARS_STAMP): tools/peer/streams-pom.xml
	mvn -q -B -C -Dstyle.color=never -f tools/peer/streams-pom.xml dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(abspath $(STREAMS_JARS))
	touch $@

streams-jars: $(STREAMS_JARS_STAMP)

# Debian's chromium and chromium-driver, for the console's browser test and `ferry perf console`:
# installed with apt-get when absent (as root, or through sudo); where neither works it says so and
# the browser test is skipped with that reason
browser:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo -n ); \
		( $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver ) \
			|| echo "browser: apt-get could not install chromium and chromium-driver: the console's browser test is skipped"; \
	else echo "browser: no apt-get: install chromium and chromedriver; the console's browser test is skipped"; fi

# the whole suite, the seeded 30 s chaos campaigns (one on loopback, one with network faults) included
test: $(STAMP) $(KAFKA_JARS_STAMP) $(SPARK_KAFKA_JARS_STAMP) $(STREAMS_JARS_STAMP) browser
	$(PY) -m pytest -q -p no:cacheprovider tests

# Spark's Kafka source and sink through 10 kill -9 of the two brokers in turn, each restarted after
# its failover (make test runs one kill): about 2 min
SPARK_KILLS ?= 10
spark-kafka-kills: $(STAMP) $(SPARK_KAFKA_JARS_STAMP)
	FERRY_SPARK_KILLS=$(SPARK_KILLS) $(PY) -m pytest -q -s -p no:cacheprovider tests/spark_read/test_spark_kafka.py -k through_a_kill

# Only the seeded fault campaigns against a live cluster: one of 30 s (about 40 s) and one of 30 s
# with network namespaces and network faults (about 45 s; skipped where `ip netns` is refused).
chaos: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m chaos tests

# Apache Kafka's tools and Java client against a fresh local cluster: one table (tool, check, result)
conformance: $(STAMP) $(KAFKA_JARS_STAMP)
	$(PY) -m tools.peer.conformance

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not integration and not spark" tests

demo: $(STAMP) $(KAFKA_JARS_STAMP)  # `make demo WAL=s3`: the brokers' WAL in S3; CONSOLE=0: no web console
	$(VENV)/bin/ferry demo $(if $(WAL),--wal $(WAL)) $(if $(filter 0,$(CONSOLE)),--no-console)

perf: $(STAMP) $(KAFKA_JARS_STAMP) $(SPARK_KAFKA_JARS_STAMP) browser
	$(VENV)/bin/ferry perf quorum
	$(VENV)/bin/ferry perf streams
	$(VENV)/bin/ferry perf lifecycle
	$(VENV)/bin/ferry perf s3-put
	$(VENV)/bin/ferry perf move
	$(VENV)/bin/ferry perf move --compare
	$(VENV)/bin/ferry perf rebalance
	$(VENV)/bin/ferry perf kafka
	$(VENV)/bin/ferry perf scale
	$(VENV)/bin/ferry perf spark-read
	$(VENV)/bin/ferry perf spark-stream
	$(VENV)/bin/ferry perf peer
	$(VENV)/bin/ferry perf console

# the same benchmarks behind a realistic S3 (docs/s3.md): a fixed 30 ms per request, and AWS S3 Standard
perf-s3: $(STAMP)
	$(VENV)/bin/ferry perf move --quick --moves-only --s3-profile fixed:30
	$(VENV)/bin/ferry perf move --quick --moves-only --s3-profile aws-standard
	$(VENV)/bin/ferry perf streams --cost-mib 1024 --s3-profile aws-standard
	$(VENV)/bin/ferry perf streams --wal s3 --s3-profile fixed:30
	$(VENV)/bin/ferry perf streams --wal s3 --s3-profile aws-standard

# 10,000 seeds of the controller simulation (about 5 min), then 20 seeded fault campaigns of
# 120 s each (about 45 min); reports and timelines in chaos-out/
soak: $(STAMP)
	$(PY) -m broker.simulation --seed 0 --count 10000 --steps 40
	$(VENV)/bin/ferry chaos run --seed 1-20 --duration 120 --out chaos-out

# 20 seeded fault campaigns of 300 s each with every node in its own network namespace and the
# network faults (about 2 h; needs `ip netns`, i.e. root); reports in chaos-net-out/
soak-net: $(STAMP)
	$(VENV)/bin/ferry chaos run --net --seed 1-20 --duration 300 --out chaos-net-out

autoscale: $(STAMP)
	$(VENV)/bin/ferry autoscale run

clean:
	rm -rf $(VENV) .ferry build *.egg-info
