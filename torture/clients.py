"""The torture run's clients: stock confluent-kafka (librdkafka) producers and consumers,
each in its own thread, each recovering from errors the way librdkafka's documentation
prescribes, and each logging every outcome as it saw it.

- ``TransactionalWriter``: transactions of 1..6 records over several partitions, some
  aborted on purpose; after some, a new producer with the same transactional.id takes
  over (an application restart). On ``commit_transaction`` errors: retriable -> retry the commit;
  ``txn_requires_abort`` -> abort (outcome aborted); fatal -> outcome unknown, a new
  producer with the same transactional.id (its ``init_transactions`` fences and
  completes the old one).
- ``IdempotentWriter``: ``enable.idempotence`` with ``acks=all``; a delivery report
  without error is an acknowledged record, a failed one has an unknown outcome. A fatal
  error (raised out of produce/poll/flush or reported) gets a new producer. One the
  faults cause: a Produce response dropped while later batches are acknowledged on the
  same connection (no Kafka broker answers out of order), then the old batch retried
  once the connection breaks; it lies outside the broker's last 5 batches, so the answer
  is OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka's (ProducerStateEntry keeps 5), and
  librdkafka makes it fatal ("rewound sequence number").
- ``CtpWorker``: reads the idempotent topic read_committed and copies each record into
  an output topic inside a transaction that also commits the input offsets
  (``send_offsets_to_transaction``); after an abort it rewinds to the batch start. A
  ``send_offsets_to_transaction`` that outlives its timeout (librdkafka waiting for a
  group coordinator it decommissioned, confluentinc/librdkafka#5511) is given up on: the
  producer is abandoned and the next one fences it, so the transaction ends aborted. The
  run counts such calls (client_wedged_calls) and fails on one no node's departure explains.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from torture.history import ABORTED, ACKED, COMMITTED, UNKNOWN, HistoryLog, decode_value, encode_value

log = logging.getLogger("torture")

TXN_TIMEOUT_MS = 10000
_COMMON = {
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 500,
    "logger": logging.getLogger("torture.rdkafka"),
    # librdkafka's re-bootstrap after every broker went away can leave a decommissioned
    # group coordinator cached, and send_offsets_to_transaction then waits forever
    # despite its timeout (confluentinc/librdkafka#5456, #5511).
    "metadata.recovery.strategy": "none",
}
_CALL_TIMEOUT_S = 15.0


class Fatal(Exception):
    """The producer cannot go on; the client replaces it."""


class Wedged(Exception):
    """A call of the producer outlived its own timeout by far: the client abandons it."""


# Given up on, never destroyed: destroying a handle with a call stuck inside can block too.
_ABANDONED: list[Producer] = []
_WEDGED_GRACE_S = 15.0


class _Client(threading.Thread):
    def __init__(self, name: str, bootstrap: str, history: HistoryLog, seed: int, stop: threading.Event) -> None:
        super().__init__(name=f"torture-{name}", daemon=True)
        self.client_name = name
        self.bootstrap = bootstrap
        self.history = history
        self.rng = random.Random(seed)
        self.stop_event = stop
        self.progress = 0  # outcomes logged so far; the run waits for it between kills
        self.fatal_errors = 0
        self.wedged: list[tuple[float, float]] = []  # (call started, given up), monotonic
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as e:  # a harness bug must fail the run, not vanish with the thread
            log.exception("%s failed", self.client_name)
            self.failure = e
        finally:
            self.history.close()

    def work(self) -> None:
        raise NotImplementedError


def _kafka_error(e: KafkaException) -> KafkaError:
    return e.args[0]


class _TransactionalProducer:
    """A transactional producer, re-created with the same transactional.id after a fatal error."""

    def __init__(self, client: _Client, transactional_id: str) -> None:
        self.client = client
        self.config = {
            "bootstrap.servers": client.bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "message.timeout.ms": TXN_TIMEOUT_MS,
            "linger.ms": 5,
            **_COMMON,
        }
        if os.environ.get("TORTURE_DEBUG"):
            self.config["debug"] = os.environ["TORTURE_DEBUG"]
        self.producer: Producer | None = None
        self.instance = 0  # which producer this is (1, 2, ...): records carry it, the checker compares

    def ready(self) -> bool:
        """Creates and initialises the producer if needed; False once the run stops."""
        while self.producer is None:
            if self.client.stop_event.is_set():
                return False
            producer = Producer(self.config)
            self.instance += 1
            while True:
                try:
                    producer.init_transactions(_CALL_TIMEOUT_S)
                    self.producer = producer
                    break
                except KafkaException as e:
                    err = _kafka_error(e)
                    if err.fatal() or self.client.stop_event.is_set():
                        log.info("%s: init_transactions: %s", self.client.client_name, err)
                        self.client.fatal_errors += err.fatal()
                        self._discard(producer)
                        break
                    time.sleep(0.1)  # retriable (broker restarting, coordinator loading)
        return True

    def replace(self) -> None:
        self.client.fatal_errors += 1
        self.restart()

    def restart(self) -> None:
        """The application restarts: the next producer's init_transactions bumps the epoch."""
        if self.producer is not None:
            self._discard(self.producer)
        self.producer = None

    def send_offsets(self, offsets: list[TopicPartition], group_metadata) -> None:
        """send_offsets_to_transaction, given up on (Wedged) when it has not returned long
        after its timeout. librdkafka's call can wait forever for a group coordinator it
        has decommissioned (a node gone from Metadata while cached as the coordinator:
        confluentinc/librdkafka#5511, open); an application would restart its producer."""
        producer, outcome = self.producer, {}

        def call() -> None:
            try:
                producer.send_offsets_to_transaction(offsets, group_metadata, _CALL_TIMEOUT_S)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                outcome["error"] = e

        started = time.monotonic()
        caller = threading.Thread(target=call, name=f"{self.client.name}-send-offsets", daemon=True)
        caller.start()
        caller.join(_CALL_TIMEOUT_S + _WEDGED_GRACE_S)
        if caller.is_alive():
            self.client.wedged.append((started, time.monotonic()))
            _ABANDONED.append(producer)
            self.producer = None  # the next one's init_transactions aborts the transaction
            raise Wedged(f"send_offsets_to_transaction has not returned after {time.monotonic() - started:.0f} s")
        if "error" in outcome:
            raise outcome["error"]

    @staticmethod
    def _discard(producer: Producer) -> None:
        try:
            producer.purge()
            producer.flush(0)
        except KafkaException:
            pass

    def produce(self, topic: str, partition: int, value: bytes) -> None:
        """Raises Fatal when the transaction cannot continue; the caller aborts it."""
        while True:
            try:
                self.producer.produce(topic, value, partition=partition)
                self.producer.poll(0)
                return
            except BufferError:
                self.producer.poll(0.05)
            except KafkaException as e:
                raise Fatal(str(_kafka_error(e))) from None

    def commit(self) -> str:
        """The outcome as the client knows it."""
        deadline = time.monotonic() + 6 * _CALL_TIMEOUT_S
        while True:
            try:
                self.producer.commit_transaction(_CALL_TIMEOUT_S)
                return COMMITTED
            except KafkaException as e:
                err = _kafka_error(e)
                if err.retriable() and time.monotonic() < deadline:
                    continue
                if err.txn_requires_abort():
                    return self.abort()
                log.info("%s: commit_transaction: %s", self.client.client_name, err)
                self.replace()
                return UNKNOWN

    def abort(self) -> str:
        """Aborted in every case: a transaction never asked to commit cannot commit; a
        fatal error here is resolved by the next producer's init_transactions."""
        deadline = time.monotonic() + 6 * _CALL_TIMEOUT_S
        while True:
            try:
                self.producer.abort_transaction(_CALL_TIMEOUT_S)
                return ABORTED
            except KafkaException as e:
                err = _kafka_error(e)
                if err.retriable() and time.monotonic() < deadline:
                    continue
                log.info("%s: abort_transaction: %s", self.client.client_name, err)
                self.replace()
                return ABORTED

    def begin(self) -> None:
        try:
            self.producer.begin_transaction()
        except KafkaException as e:
            raise Fatal(str(_kafka_error(e))) from None

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(5)


class TransactionalWriter(_Client):
    def __init__(self, name, bootstrap, history, seed, stop, partitions: list[tuple[str, int]],
                 abort_ratio: float = 0.2, max_size: int = 6, restart_ratio: float = 0.05) -> None:
        super().__init__(name, bootstrap, history, seed, stop)
        self.partitions = partitions
        self.abort_ratio = abort_ratio
        self.max_size = max_size
        # after this share of transactions a new producer takes over (InitProducerId while
        # coordinators are stopped or moved: the epochs it is given are checked)
        self.restart_ratio = restart_ratio

    def work(self) -> None:
        txp = _TransactionalProducer(self, f"torture-{self.client_name}")
        x = 0
        while txp.ready():
            x += 1
            n = self.rng.randint(1, self.max_size)
            outcome = self._transaction(txp, x, n)
            self.history.write(kind="txn", p=self.client_name, x=x, n=n, outcome=outcome)
            self.progress += 1
            if self.stop_event.is_set():
                break
            if self.rng.random() < self.restart_ratio:
                txp.restart()
        txp.close()

    def _transaction(self, txp: _TransactionalProducer, x: int, n: int) -> str:
        try:
            txp.begin()
            for i in range(n):
                topic, partition = self.rng.choice(self.partitions)
                txp.produce(topic, partition, encode_value(p=self.client_name, x=x, i=i, n=n, g=txp.instance))
        except Fatal as e:
            log.info("%s: transaction %d: %s", self.client_name, x, e)
            return txp.abort()
        if self.rng.random() < self.abort_ratio:
            return txp.abort()
        return txp.commit()


class IdempotentWriter(_Client):
    def __init__(self, name, bootstrap, history, seed, stop, topic: str, partitions: int,
                 batch: int = 5, pause_s: float = 0.05) -> None:
        super().__init__(name, bootstrap, history, seed, stop)
        self.topic = topic
        self.partitions = partitions
        self.batch = batch
        self.pause_s = pause_s

    def _producer(self) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 60000, **_COMMON})

    def work(self) -> None:
        producer = self._producer()
        fatal = threading.Event()
        reasons: list[str] = []  # the fatal error as librdkafka worded it
        s = 0

        def delivered(err, msg) -> None:
            v = decode_value(msg.value())
            if err is None:
                self.history.write(kind="idem", p=self.client_name, s=v["s"], outcome=ACKED,
                                   partition=msg.partition(), offset=msg.offset())
            else:
                self.history.write(kind="idem", p=self.client_name, s=v["s"], outcome=UNKNOWN, error=str(err))
                if err.fatal():
                    reasons.append(str(err))
                    fatal.set()
            self.progress += 1

        while not self.stop_event.is_set():
            try:
                for _ in range(self.batch):
                    s += 1
                    self._produce(producer, s, delivered)
                producer.poll(self.pause_s)
            except (KafkaException, SystemError) as e:
                # librdkafka raises its fatal error out of produce, poll and flush too, not
                # only through the delivery report: often before the report is served
                if not _is_fatal(e):
                    raise
                reasons.append(str(e))
                fatal.set()
            if fatal.is_set():  # librdkafka's idempotent producer: a fatal error needs a new instance
                self.fatal_errors += 1
                _close_fatal(producer)
                log.warning("%s: fatal error, new producer: %s", self.client_name, reasons[0])
                producer = self._producer()
                reasons.clear()
                fatal.clear()
        try:
            producer.flush(70)
            producer.close()
        except (KafkaException, SystemError) as e:
            if not _is_fatal(e):
                raise
            self.fatal_errors += 1
            _close_fatal(producer)

    def _produce(self, producer: Producer, s: int, delivered) -> None:
        while True:
            try:
                producer.produce(self.topic, encode_value(p=self.client_name, s=s),
                                 partition=s % self.partitions, on_delivery=delivered)
                return
            except BufferError:
                producer.poll(0.05)


def _is_fatal(e: Exception) -> bool:
    """A KafkaException carrying a fatal error (produce says only _FATAL), or the
    SystemError confluent-kafka raises when that exception surfaces inside a delivery
    callback."""
    if isinstance(e, SystemError):
        e = e.__cause__ if isinstance(e.__cause__, KafkaException) else None
    if e is None:
        return False
    err = _kafka_error(e)
    return err.fatal() or err.code() == KafkaError._FATAL


def _close_fatal(producer: Producer) -> None:
    """Fails what the producer still holds (each record logged as unknown by its delivery
    report) and closes it: a fatal producer raises again out of flush."""
    try:
        producer.purge()
        producer.flush(10)
    except (KafkaException, SystemError):
        pass
    try:
        producer.close()
    except (KafkaException, SystemError, RuntimeError) as e:
        log.warning("closing a producer after its fatal error: %r", e)


class CtpWorker(_Client):
    def __init__(self, name, bootstrap, history, seed, stop, source: str, sink: str, sink_partitions: int,
                 group: str, abort_ratio: float = 0.1) -> None:
        super().__init__(name, bootstrap, history, seed, stop)
        self.source = source
        self.sink = sink
        self.sink_partitions = sink_partitions
        self.group = group
        self.abort_ratio = abort_ratio

    def _consumer(self) -> Consumer:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                             "heartbeat.interval.ms": 500, **_COMMON})
        consumer.subscribe([self.source])
        return consumer

    def work(self) -> None:
        txp = _TransactionalProducer(self, f"torture-{self.client_name}")
        consumer = self._consumer()
        x = 0
        while txp.ready():
            if self.stop_event.is_set():
                break
            msgs = [m for m in consumer.consume(100, 0.3) if m.error() is None]
            if not msgs:
                continue
            x += 1
            outcome = self._transaction(txp, consumer, x, msgs)
            self.history.write(kind="txn", p=self.client_name, x=x, n=len(msgs), outcome=outcome)
            self.progress += 1
            if outcome == ABORTED:
                self._rewind(consumer, msgs)
            elif outcome == UNKNOWN:  # start over from the group's committed offsets
                consumer.close()
                consumer = self._consumer()
        txp.close()
        consumer.close()

    def _transaction(self, txp: _TransactionalProducer, consumer: Consumer, x: int, msgs: list) -> str:
        n = len(msgs)
        try:
            txp.begin()
            for i, m in enumerate(msgs):
                value = encode_value(p=self.client_name, x=x, i=i, n=n, g=txp.instance, sp=m.partition(),
                                     so=m.offset())
                txp.produce(self.sink, m.offset() % self.sink_partitions, value)
            ends: dict[int, int] = {}
            for m in msgs:
                ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
            offsets = [TopicPartition(self.source, p, o) for p, o in sorted(ends.items())]
            txp.send_offsets(offsets, consumer.consumer_group_metadata())
        except Wedged as e:
            # aborted for certain: never asked to commit, and fenced by the next producer
            log.warning("%s: transaction %d: %s; producer abandoned", self.client_name, x, e)
            return ABORTED
        except (Fatal, KafkaException) as e:
            log.info("%s: transaction %d: %s", self.client_name, x, e)
            return txp.abort()
        if self.rng.random() < self.abort_ratio:
            return txp.abort()
        return txp.commit()

    def _rewind(self, consumer: Consumer, msgs: list) -> None:
        starts: dict[int, int] = {}
        for m in msgs:
            starts[m.partition()] = min(starts.get(m.partition(), m.offset()), m.offset())
        for p, o in starts.items():
            try:
                consumer.seek(TopicPartition(self.source, p, o))
            except KafkaException:
                pass  # no longer assigned: the next owner starts from the committed offset
