"""Spark's built-in Kafka connector (spark-sql-kafka-0-10) resolved by Maven for PySpark."""

from __future__ import annotations

import os
from pathlib import Path

from tests.reference import maven

POM = Path(__file__).parent / "spark-kafka" / "pom.xml"
# What `--packages` would add to Spark's own jars: the connector, its token provider, the
# Kafka client and commons-pool2 (Spark, Scala, Hadoop and the codecs come with PySpark).
WANTED = ("spark-sql-kafka-0-10_", "spark-token-provider-kafka-0-10_", "kafka-clients-", "commons-pool2-")


def connector_jars() -> str:
    """The comma-separated list for spark.jars."""
    entries = maven.classpath(POM, "spark-kafka").split(os.pathsep)
    return ",".join(e for e in entries if Path(e).name.startswith(WANTED))
