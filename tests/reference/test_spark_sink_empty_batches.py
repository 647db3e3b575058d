"""The eosbroker sink on Apache Kafka: micro-batches with nothing to write (markers only,
aborted data only, a filter emptying some or all tasks) commit and the query goes on,
and the README's Spark example runs twice in a row with its rows exactly once. Kafka
answers EndTxn(commit) on an id that never began a transaction with INVALID_TXN_STATE
as eosbroker does, so these failed on both before the sink stopped opening one.
tests/spark/test_spark_empty_batches.py runs the same on eosbroker."""

from __future__ import annotations

import pytest

from tests.spark.empty_batches import check_empty_batches, check_readme_example_twice
from tests.spark.helpers import spark_session

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def spark():
    session = spark_session("local[2]")
    yield session
    session.stop()


def test_micro_batches_with_nothing_to_write_commit_on_kafka(spark, kafka_broker, tmp_path):
    check_empty_batches(spark, kafka_broker.bootstrap, tmp_path)


@pytest.mark.long  # two fresh Spark JVMs, minutes: make test-long
def test_the_readme_example_runs_twice_in_a_row_on_kafka(kafka_broker, tmp_path):
    check_readme_example_twice(kafka_broker.bootstrap, tmp_path)
