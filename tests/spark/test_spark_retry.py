"""Task retries (local[2,3]: up to three attempts per task) and a batch write rerun under
the same write id: the failed attempt's transaction is aborted, the rerun is a replay."""

from __future__ import annotations

import uuid

import pytest

from spark_client.options import HOOK_FAIL_PARTITION_ATTEMPT
from tests.spark.helpers import consume, create_topic, spark_session, transaction_states

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]  # a Spark session starts slowly on a busy machine


@pytest.fixture(scope="module")
def spark():
    session = spark_session("local[2,3]")
    yield session
    session.stop()


def _write(spark, bootstrap: str, topic: str, prefix: str, n: int, **options) -> None:
    writer = (spark.range(n).repartition(3).selectExpr("cast(id as string) as value")
              .write.format("eosbroker").mode("append").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", topic).option("transactional.id.prefix", prefix).option("write.id", "w1"))
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def test_a_task_failing_on_its_first_attempt_still_writes_exactly_once(spark, broker):
    topic, prefix, n = f"retry-{uuid.uuid4().hex[:8]}", f"p{uuid.uuid4().hex[:6]}", 1000
    create_topic(broker.bootstrap, topic, 3)
    _write(spark, broker.bootstrap, topic, prefix, n, **{HOOK_FAIL_PARTITION_ATTEMPT: "1:0"})
    values = [m.value() for m in consume(broker.bootstrap, topic, 3)]
    assert len(values) == n and set(values) == {b"%d" % i for i in range(n)}
    assert len(consume(broker.bootstrap, topic, 3, "read_uncommitted")) > n  # the failed attempt did write
    states = transaction_states(broker.bootstrap, prefix)
    failed = [s for t, s in states.items() if t.startswith(f"{prefix}-w1-0-1-0-")]
    retried = [s for t, s in states.items() if t.startswith(f"{prefix}-w1-0-1-1-")]
    # Aborted by the failing task itself (nothing left open for the driver to fence).
    assert failed == ["CompleteAbort"] and retried == ["CompleteCommit"]

    # The same job again under the same write id: a replay of a committed batch, aborted.
    first_run = set(states)
    _write(spark, broker.bootstrap, topic, prefix, n)
    assert len(consume(broker.bootstrap, topic, 3)) == n
    replayed = [s for t, s in transaction_states(broker.bootstrap, prefix).items() if t not in first_run]
    assert replayed == ["CompleteAbort"] * 3
