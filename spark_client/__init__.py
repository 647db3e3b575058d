"""PySpark data source "eosbroker" (exactly-once sink, read_committed source) and the
small wire-level client it uses. ``register(spark)`` makes the format available."""


def register(spark) -> None:
    from spark_client.datasource import EosBrokerDataSource

    spark.dataSource.register(EosBrokerDataSource)
