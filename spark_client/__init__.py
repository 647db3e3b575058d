"""PySpark data source "eosbroker" (exactly-once sink, read_committed source) and the
small wire-level client it uses. ``register(spark)`` makes the format available;
``create_topic`` makes the output topic (the sink never creates topics)."""


def register(spark) -> None:
    from spark_client.datasource import EosBrokerDataSource

    spark.dataSource.register(EosBrokerDataSource)


def create_topic(bootstrap: str, topic: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    """Creates ``topic`` unless it exists (an existing topic keeps its partitions and settings)."""
    from spark_client.wire import Client

    with Client(bootstrap) as cluster:
        cluster.create_topic(topic, partitions, configs)
