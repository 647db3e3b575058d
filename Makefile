# Everything a fresh machine needs is installed by these targets.
# The venv's interpreter: an optimized build when the machine has one (tools/pick-python.sh
# says why); `make PYTHON=python3.12 ...` picks another. An existing .venv is kept.
PYTHON ?= $(shell sh tools/pick-python.sh python3 /usr/bin/python3 /usr/local/bin/python3)
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
BROKER_STAMP := $(VENV)/.broker-stamp
HOST   ?= 127.0.0.1
PORT   ?= 9092
DATA   ?= ./data

.PHONY: venv compile run java test test-long test-reference unit bench soak torture fuzz spark-demo compose-test console-test kafkajs-test clean

# The broker alone (make run): no PySpark, test or bench extras.
# setuptools, which venv adds up to Python 3.11, is not needed in the venv (pip builds in
# an isolated environment); left there, its distutils-precedence.pth puts an import hook
# in front of every import of every process.
$(BROKER_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	$(PY) -m pip uninstall -q -y setuptools
	touch $(BROKER_STAMP)

# Everything the tests, the bench and the Spark demo need.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench,spark]'
	$(PY) -m pip uninstall -q -y setuptools
	touch $(STAMP) $(BROKER_STAMP)

venv: $(STAMP)

# Byte-compile the sources: with PYTHONDONTWRITEBYTECODE set, every start would
# otherwise compile them again at every start. Then the dataclasses' generated
# methods (broker/dataclass_code.py), which Python would otherwise compile at every start,
# and the specs of the answer and request types (protocol/message_specs.py).
compile: venv
	$(PY) -m compileall -q protocol coordinator broker spark_client
	$(PY) -m broker.dataclass_code
	$(PY) -m protocol.answer_wire

run: $(BROKER_STAMP)
	$(PY) -m compileall -q protocol coordinator broker
	$(PY) -m broker.dataclass_code
	$(PY) -m protocol.answer_wire
	$(VENV)/bin/eosbroker serve --host $(HOST) --port $(PORT) --data-dir $(DATA)

# PySpark (tests/spark, the bench's spark-write, spark-demo) needs a Java runtime; the
# reference tests (Apache Kafka, the Java client) need a JDK and Maven as well.
java:
	@command -v java >/dev/null 2>&1 && command -v javac >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1 || \
	  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y openjdk-17-jdk-headless maven)

# The reference tests beyond a fixed subset (marker reference_extended) run in test-reference.
test: venv compile java
	$(PY) -m pytest -q -p no:cacheprovider -n 2 --durations=25 -m "not reference_extended and not browser and not long and not kafkajs"

# Tests of minutes each (the README's Spark example run twice, on eosbroker and on Kafka).
test-long: venv compile java
	$(PY) -m pytest -q -p no:cacheprovider -m long

test-reference: venv compile java
	$(PY) -m pytest -q -p no:cacheprovider -m reference tests/reference

unit: venv
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

# BENCH_ARGS="--brokers eosbroker,tansu --only transactions" passes options to the bench.
bench: venv compile java
	$(PY) -m bench $(BENCH_ARGS)

# An hour of steady transactional load with retention, compaction and topic churn: RSS,
# descriptors and tasks must stay flat (bench/README.md). SOAK_ARGS="--duration 360" for 6 minutes.
soak: venv compile
	$(PY) -m bench.soak $(SOAK_ARGS)

# Crash torture: CYCLES kill -9 / restart cycles under exactly-once load, then the
# anomaly checker (SEED=n repeats a run's kill points and client choices). NODES=3 adds
# node and transaction-coordinator faults (stop/kill with markers in flight, long
# pauses, leader-coordinator link cuts, coordinator moves).
CYCLES ?= 200
torture: venv compile
	$(PY) -m torture --cycles $(CYCLES) $(if $(SEED),--seed $(SEED)) $(if $(NODES),--nodes $(NODES))

# FRAMES mutated frames against a live broker while a transactional client works, then
# CLUSTER_FRAMES against a --nodes 3 broker with node and link faults among them, then
# the wire property tests with 20x their CI example counts.
FRAMES ?= 1000000
CLUSTER_FRAMES ?= 200000
fuzz: venv compile
	$(PY) -m torture.fuzz --frames $(FRAMES) $(if $(SEED),--seed $(SEED))
	$(PY) -m torture.fuzz --sasl --frames $$(( $(FRAMES) / 10 )) $(if $(SEED),--seed $(SEED))
	$(PY) -m torture.fuzz --frames $(CLUSTER_FRAMES) --nodes 3 $(if $(SEED),--seed $(SEED))
	EOSBROKER_FUZZ_SCALE=20 $(PY) -m pytest -q -p no:cacheprovider tests/unit/test_fuzz_wire.py tests/unit/test_fuzz_handlers.py tests/unit/test_fuzz_sasl.py tests/unit/test_fuzz_cluster.py tests/unit/test_transaction_coordinator_model.py

# BOOTSTRAP=127.0.0.1:9092 uses a running broker; without it the demo starts its own.
spark-demo: venv java
	$(PY) examples/pipeline.py $(if $(BOOTSTRAP),--bootstrap $(BOOTSTRAP))

# The admin console in Debian's chromium, driven by playwright-core (headless); writes
# the screenshot in docs/ (SCREENSHOT=... elsewhere).
SCREENSHOT ?= docs/console.png
TIMELINE_SCREENSHOT ?= docs/console-timeline.png
LOG_SCREENSHOT ?= docs/console-log.png
GROUPS_SCREENSHOT ?= docs/console-groups.png

# kafkajs against eosbroker and (the security matrix) Apache Kafka: Java and Maven too.
kafkajs-test: venv compile java
	cd tests/kafkajs && npm install --no-audit --no-fund --silent
	$(PY) -m pytest -q -p no:cacheprovider -m kafkajs tests/kafkajs

console-test: venv compile
	@command -v chromium >/dev/null 2>&1 || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium)
	cd tests/browser && npm install --no-audit --no-fund --silent
	CONSOLE_SCREENSHOT=$(abspath $(SCREENSHOT)) TIMELINE_SCREENSHOT=$(abspath $(TIMELINE_SCREENSHOT)) LOG_SCREENSHOT=$(abspath $(LOG_SCREENSHOT)) GROUPS_SCREENSHOT=$(abspath $(GROUPS_SCREENSHOT)) $(PY) -m pytest -q -p no:cacheprovider -m browser tests/browser

# docker-compose.yml for real (as root): Debian's docker.io, a private dockerd, a
# debootstrap base image, host networking only; everything is removed afterwards.
compose-test:
	bash tests/compose/run.sh

clean:
	rm -rf $(VENV) build *.egg-info
