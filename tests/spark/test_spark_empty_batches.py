"""A micro-batch in which the sink writes nothing commits as an empty batch and the
query goes on (tests/spark/empty_batches.py says which batches); the README's Spark
example runs twice in a row (the second run's batch write is a replay whose abort
markers make an empty micro-batch). The same on Apache Kafka: tests/reference/."""

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


def test_micro_batches_with_nothing_to_write_commit_and_the_query_goes_on(spark, broker, tmp_path):
    check_empty_batches(spark, broker.bootstrap, tmp_path)


@pytest.mark.long  # two fresh Spark JVMs, minutes: make test-long
def test_the_readme_example_runs_twice_in_a_row(broker, tmp_path):
    check_readme_example_twice(broker.bootstrap, tmp_path)
