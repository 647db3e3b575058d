"""GET /metrics on the admin port: Prometheus text format (prometheus-client).

Names follow Kafka's JMX metrics as the Prometheus JMX exporter renders them
(``kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,version=9``
becomes ``kafka_network_requestmetrics_requests_total{request="Produce",version="9"}``)
where Kafka has one; ``eosbroker_*`` where it has none (the last stable offset, open
transactions by state).

Two kinds: counters of answered requests, counted as the server answers them; and
gauges read at scrape time from the live state (``broker.control.snapshot``), the same
objects the request handlers read.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter as Tally
from functools import lru_cache

from aiohttp import web
from kio.schema.errors import ErrorCode
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from broker.control import snapshot
from broker.control.routes import ERROR_SCHEMA
from broker.control.operations import ControlError
from protocol.request_wire import api_name
from protocol.names import CONSUMER_OFFSETS, INTERNAL_TOPICS, TRANSACTION_STATE

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


# A counter's time of creation is one more series per label set, which Kafka's JMX
# metrics do not have (process-wide: the admin server is the only exporter).
disable_created_metrics()


@lru_cache(maxsize=None)
def _error_fields(cls: type) -> tuple[tuple[str, bool], ...]:
    """(field name, holds entities) for the fields of a response class worth walking."""
    out = []
    for f in dataclasses.fields(cls):
        if f.name == "error_code":
            out.append((f.name, False))
        elif f.metadata.get("kafka_type") is None:  # nested entities (or tuples of them)
            out.append((f.name, True))
    return tuple(out)


def error_codes(message) -> Tally:
    """Every error_code in a response and its nested entities, counted (Kafka's
    ``AbstractResponse.errorCounts``: one per partition, group, transactional id...)."""
    found: Tally = Tally()
    stack = [message]
    while stack:
        m = stack.pop()
        if not dataclasses.is_dataclass(m):
            continue
        for name, nested in _error_fields(type(m)):
            value = getattr(m, name)
            if not nested:
                found[int(value)] += 1
            elif isinstance(value, tuple):
                stack.extend(value)
            elif value is not None:
                stack.append(value)
    return found


class RequestMetrics:
    """Counted as requests are answered: the server calls ``observe`` for each."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter("kafka_network_requestmetrics_requests", "Requests answered (Kafka: RequestsPerSec)",
                                ["request", "version"], registry=registry)
        self.total_time = Histogram("kafka_network_requestmetrics_totaltime_seconds",
                                    "Time from a request read to its response written out (Kafka: TotalTimeMs)",
                                    ["request"], buckets=_LATENCY_BUCKETS, registry=registry)
        self.errors = Counter("kafka_network_requestmetrics_errors", "Error codes in responses (Kafka: ErrorsPerSec)",
                              ["request", "error"], registry=registry)
        self.bytes_in = Counter("kafka_server_socket_server_metrics_incoming_byte",
                                "Request bytes read (Kafka: socket-server-metrics incoming-byte-total)",
                                registry=registry)
        self.bytes_out = Counter("kafka_server_socket_server_metrics_outgoing_byte",
                                 "Response bytes written (Kafka: socket-server-metrics outgoing-byte-total)",
                                 registry=registry)

    def observe(self, api_key: int, version: int, seconds: float, request_bytes: int, response_bytes: int,
                response) -> None:
        name = api_name(api_key)  # Kafka's request label: Produce, InitProducerId
        self.requests.labels(name, str(version)).inc()
        self.total_time.labels(name).observe(seconds)
        self.bytes_in.inc(request_bytes)
        self.bytes_out.inc(response_bytes)
        if response is not None:
            for code, n in error_codes(response).items():
                self.errors.labels(name, _error_name(code)).inc(n)


class AuthenticationMetrics:
    """SASL logins, as Kafka's socket-server-metrics count them, with the principal a
    successful one named: the server calls ``observe`` at the end of each."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.successful = Counter("kafka_server_socket_server_metrics_successful_authentication",
                                  "Successful SASL (re-)authentications (Kafka: successful-authentication-total, "
                                  "successful-reauthentication-total)",
                                  ["listener", "mechanism", "principal", "reauthentication"], registry=registry)
        self.failed = Counter("kafka_server_socket_server_metrics_failed_authentication",
                              "Failed SASL (re-)authentications (Kafka: failed-authentication-total, "
                              "failed-reauthentication-total)",
                              ["listener", "reauthentication"], registry=registry)

    def observe(self, listener: str, mechanism: str | None, principal: str | None, reauthentication: bool) -> None:
        again = "true" if reauthentication else "false"
        if principal is None:
            self.failed.labels(listener, again).inc()
        else:
            self.successful.labels(listener, mechanism, principal, again).inc()


@lru_cache(maxsize=None)
def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


class StateCollector:
    """Gauges read from the broker's live state at every scrape."""

    def __init__(self, broker) -> None:
        self.broker = broker

    def collect(self):
        broker = self.broker
        now_ms = broker.cluster.clock.now_ms()
        labels = ["topic", "partition"]
        log_start = GaugeMetricFamily("kafka_log_log_logstartoffset", "First offset of the log (Kafka: Log LogStartOffset)", labels=labels)
        log_end = GaugeMetricFamily("kafka_log_log_logendoffset", "Offset after the last record (Kafka: Log LogEndOffset)", labels=labels)
        high = GaugeMetricFamily("eosbroker_partition_high_watermark", "High watermark", labels=labels)
        lso = GaugeMetricFamily("eosbroker_partition_last_stable_offset", "Last stable offset: where read_committed consumers stop", labels=labels)
        lag = GaugeMetricFamily("eosbroker_partition_lso_lag", "High watermark minus last stable offset: records held back by open transactions", labels=labels)
        open_txns = GaugeMetricFamily("eosbroker_partition_open_transactions", "Transactions open on the partition", labels=labels)
        aborted = GaugeMetricFamily("eosbroker_partition_aborted_transactions", "Entries in the partition's aborted-transaction index", labels=labels)
        partitions = snapshot.partitions(broker)
        for p in partitions:
            key = [p["topic"], str(p["partition"])]
            log_start.add_metric(key, p["log_start_offset"])
            log_end.add_metric(key, p["high_watermark"])
            high.add_metric(key, p["high_watermark"])
            lso.add_metric(key, p["last_stable_offset"])
            lag.add_metric(key, p["high_watermark"] - p["last_stable_offset"])
            open_txns.add_metric(key, p["open_transactions"])
            aborted.add_metric(key, p["aborted_transactions"])
        yield from (log_start, log_end, high, lso, lag, open_txns, aborted)
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount", "Partitions (Kafka: ReplicaManager PartitionCount)",
                                value=len(partitions))
        yield GaugeMetricFamily("kafka_server_replicamanager_produceridcount",
                                "Producer ids with state in some partition (Kafka: ReplicaManager ProducerIdCount)",
                                value=len({p.producer_id for part in broker.cluster.partitions.values()
                                           for p in part.producer_state.entries().values()}))
        transactions = snapshot.transactions(broker, now_ms)
        by_state = GaugeMetricFamily("eosbroker_transactions", "Transactional ids by coordinator state", labels=["state"])
        for state, n in sorted(Tally(t["state"] for t in transactions).items()):
            by_state.add_metric([state], n)
        yield by_state
        ages = [t["age_ms"] for t in transactions if t["age_ms"] is not None]
        yield GaugeMetricFamily("eosbroker_transaction_oldest_open_age_seconds",
                                "Age of the oldest transaction still open (0: none)", value=max(ages, default=0) / 1000)
        node_state = GaugeMetricFamily("eosbroker_node_state", "1 for the state each node is in", labels=["node", "state"])
        for n in snapshot.nodes(broker):
            node_state.add_metric([str(n["node_id"]), n["state"]], 1)
        yield node_state
        yield from _share_partitions(broker)
        yield from _group_counts(snapshot.groups(broker))
        # Kafka has no such metric; a count that keeps rising under a steady load is a leak.
        yield GaugeMetricFamily("eosbroker_asyncio_tasks", "Asyncio tasks not yet done in the broker's event loop",
                                value=len(asyncio.all_tasks()))


# A streams group's states, each with its gauge as Kafka registers them.
_STREAMS_GROUP_STATES = ("Empty", "NotReady", "Assigning", "Reconciling", "Stable", "Dead")


def _group_counts(groups: list[dict]):
    """Groups by protocol and streams groups by state (Kafka: group-coordinator-metrics
    group-count and streams-group-count), and NumGroups, which counts classic groups."""
    by_protocol = Tally(g["protocol"] for g in groups)
    yield GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups",
                            "Classic groups (Kafka: GroupMetadataManager NumGroups)", value=by_protocol["classic"])
    count = GaugeMetricFamily("kafka_server_group_coordinator_metrics_group_count",
                              "Groups by rebalance protocol (Kafka: group-coordinator-metrics group-count)",
                              labels=["protocol"])
    for protocol in ("classic", "consumer", "share", "streams"):
        count.add_metric([protocol], by_protocol[protocol])
    yield count
    streams = GaugeMetricFamily("kafka_server_group_coordinator_metrics_streams_group_count",
                                "Streams groups by state (Kafka: group-coordinator-metrics streams-group-count)",
                                labels=["state"])
    by_state = Tally(g["state"] for g in groups if g["protocol"] == "streams")
    for state in _STREAMS_GROUP_STATES:
        streams.add_metric([state], by_state[state])
    yield streams


def _share_partitions(broker):
    """Share-partitions (KIP-932) on their leaders: records in flight by state, and the
    share-partition start offset."""
    labels = ["group", "topic", "partition"]
    records = GaugeMetricFamily("eosbroker_share_partition_records",
                                "Records in flight of a share-partition, by state", labels=[*labels, "state"])
    start = GaugeMetricFamily("eosbroker_share_partition_start_offset", "Share-partition start offset (SPSO)",
                              labels=labels)
    for row in snapshot.share_partitions(broker):
        names = [row["group_id"], row["topic"], str(row["partition"])]
        for state, n in row["counts"].items():
            records.add_metric([*names, state], n)
        start.add_metric(names, row["start_offset"])
    yield records
    yield start


class FaultFiringsCollector:
    """Firings of the request fault rules, per rule and action (removed rules included)."""

    def __init__(self, broker) -> None:
        self.broker = broker

    def collect(self):
        firings = CounterMetricFamily("eosbroker_fault_firings", "Requests a fault rule acted on",
                                      labels=["rule", "action"])
        for (rule_id, action), n in sorted(self.broker.faults.firings.items()):
            firings.add_metric([str(rule_id), action], n)
        yield firings


# Transactions last from milliseconds to their timeout (Kafka's default maximum: 15 min).
_TRANSACTION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
# Kafka's MBeans of each coordinator's partition load sensor (JMX exporter names).
_LOAD_METRICS = {TRANSACTION_STATE: "kafka_server_transaction_coordinator_metrics_partition_load_time",
                 CONSUMER_OFFSETS: "kafka_server_group_coordinator_metrics_partition_load_time"}


class CoordinatorMetrics:
    """Counted as coordinators finish things: transactions completed (start to markers
    written) and coordinator partitions loaded (scheduled to loaded)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.durations = Histogram("eosbroker_transaction_duration_seconds",
                                   "Transactions from their first partition added to their markers written",
                                   ["outcome"], buckets=_TRANSACTION_BUCKETS, registry=registry)
        self.loads = Counter("eosbroker_coordinator_partition_loads", "Coordinator partitions loaded",
                             ["coordinator"], registry=registry)
        self.load_max = {topic: Gauge(f"{name}_max", "Longest coordinator partition load in ms "
                                      "(Kafka: partition-load-time-max; here since start)", registry=registry)
                         for topic, name in _LOAD_METRICS.items()}
        self.load_avg = {topic: Gauge(f"{name}_avg", "Mean coordinator partition load in ms "
                                      "(Kafka: partition-load-time-avg; here since start)", registry=registry)
                         for topic, name in _LOAD_METRICS.items()}
        self._totals: dict[str, list[float]] = {topic: [0, 0.0, 0.0] for topic in _LOAD_METRICS}  # count, ms, max

    def transaction_completed(self, outcome: str, seconds: float) -> None:
        self.durations.labels(outcome).observe(seconds)

    def coordinator_loaded(self, topic: str, partition: int, seconds: float) -> None:
        if topic not in _LOAD_METRICS:
            return
        ms = seconds * 1000
        self.loads.labels("transaction" if topic == TRANSACTION_STATE else "group").inc()
        totals = self._totals[topic]
        totals[0] += 1
        totals[1] += ms
        totals[2] = max(totals[2], ms)
        self.load_avg[topic].set(totals[1] / totals[0])
        self.load_max[topic].set(totals[2])


def add_routes(admin) -> None:
    registry = CollectorRegistry(auto_describe=False)
    admin.broker.request_observer = RequestMetrics(registry).observe
    admin.broker.authentication_observer = AuthenticationMetrics(registry).observe
    coordinators = CoordinatorMetrics(registry)
    admin.broker.cluster.on_transaction_completed = coordinators.transaction_completed
    admin.broker.cluster.on_coordinator_loaded = coordinators.coordinator_loaded
    registry.register(StateCollector(admin.broker))
    registry.register(FaultFiringsCollector(admin.broker))

    async def metrics(request: web.Request) -> web.Response:
        internal = request.query.get("internal", "true")
        if internal not in ("true", "false"):
            raise ControlError("internal must be true or false", "internal")
        body = generate_latest(registry if internal == "true" else WithoutInternalTopics(registry))
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    admin.add_route("GET", "/metrics", metrics, openapi={
        "operationId": "metrics", "summary": "Metrics in the Prometheus text format",
        "parameters": [{"name": "internal", "in": "query", "required": False,
                        "description": "false leaves out the internal topics' partitions (__consumer_offsets, "
                                       "__transaction_state: 100 partitions by default, mostly idle)",
                        "schema": {"type": "string", "enum": ["true", "false"], "default": "true"}}],
        "responses": {"200": {"description": "the metrics", "content": {"text/plain": {"schema": {"type": "string"}}}},
                      "4XX": {"description": "refused; `field` names the offending argument",
                              "content": {"application/json": {"schema": ERROR_SCHEMA}}}}})


class WithoutInternalTopics:
    """A registry's metrics without the series of the internal topics' partitions."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self):
        for family in self.registry.collect():  # fresh objects at every collect: free to trim
            family.samples = [s for s in family.samples if s.labels.get("topic") not in INTERNAL_TOPICS]
            yield family
