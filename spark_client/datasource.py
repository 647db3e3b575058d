"""The PySpark data source "eosbroker": an exactly-once sink and a read_committed source.

    from spark_client import register
    register(spark)
    df.write.format("eosbroker").option("kafka.bootstrap.servers", "127.0.0.1:9092") \
        .option("topic", "out").mode("append").save()

It is deliberately not called "kafka": built-in sources win name clashes.
"""

from __future__ import annotations

from pyspark.sql import datasource as ds
from pyspark.sql.types import StructType

from spark_client.options import SinkOptions, SourceOptions
from spark_client.sink import EosBrokerBatchWriter, EosBrokerStreamWriter
from spark_client.source import SCHEMA, EosBrokerReader, EosBrokerStreamReader

NAME = "eosbroker"


class EosBrokerDataSource(ds.DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> EosBrokerReader:
        return EosBrokerReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> EosBrokerStreamReader:
        return EosBrokerStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> EosBrokerBatchWriter:
        _no_overwrite(overwrite)
        return EosBrokerBatchWriter(SinkOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> EosBrokerStreamWriter:
        _no_overwrite(overwrite)
        return EosBrokerStreamWriter(SinkOptions.parse(self.options), schema)


def _no_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise ValueError("a Kafka topic can only be appended to: use mode('append') / outputMode('append')")
