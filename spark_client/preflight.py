"""Checks the driver makes before any task starts, with errors short enough to read:
the bootstrap servers answer, the topics exist (and how many partitions they have),
the input columns have types the sink can write."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from spark_client.wire import Client, KafkaError

CHECK_TIMEOUT_S = 10.0


class PreflightError(ValueError):
    """The job cannot run as configured; nothing was written."""


def partition_counts(bootstrap: str, topics: tuple[str, ...], security=None) -> dict[str, int]:
    """Partitions of each topic; a clear error for an unreachable broker or a missing topic."""
    try:
        with Client(bootstrap, client_id="eosbroker-spark-driver", timeout=CHECK_TIMEOUT_S, security=security) as cluster:
            counts = {}
            for topic in topics:
                try:
                    counts[topic] = cluster.partition_count(topic)
                except KafkaError as e:
                    if e.error != ErrorCode.unknown_topic_or_partition:
                        raise
                    raise PreflightError(
                        f"topic {topic!r} does not exist on {bootstrap} (the eosbroker data source does not "
                        f"create topics); create it first: spark_client.create_topic({bootstrap!r}, {topic!r}, "
                        f"partitions=3) or eosbroker topics --bootstrap-server {bootstrap} create --topic {topic} "
                        f"--partitions 3") from None
            return counts
    except (OSError, TimeoutError) as e:
        raise PreflightError(f"cannot reach the broker at kafka.bootstrap.servers={bootstrap!r}: "
                             f"{_root_cause(e)}") from None
    except KafkaError as e:
        raise PreflightError(f"the broker at {bootstrap} answered {e}") from None


def _root_cause(e: BaseException) -> str:
    while e.__cause__ is not None or e.__context__ is not None:
        e = e.__cause__ or e.__context__
    return str(e) or type(e).__name__


def check_columns(schema, value_column: str, key_column: str, headers_column: str, partition_column: str,
                  topic_column: str, topic_option: str | None, value_format: str, key_format: str) -> None:
    """The column types Spark's Kafka sink accepts, plus struct columns for json/protobuf."""
    from pyspark.sql import types as T

    fields = {f.name: f.dataType for f in schema.fields}

    def fail(message: str) -> None:
        raise PreflightError(f"{message}; the input has columns {', '.join(f'{n} {t.simpleString()}' for n, t in fields.items())}")

    def encodable(name: str, fmt: str, option: str) -> None:
        kind = fields[name]
        if fmt == "raw" and not isinstance(kind, (T.StringType, T.BinaryType)):
            fail(f"column {name!r} must be string or binary with {option}=raw, not {kind.simpleString()} "
                 f"(set {option} to json or protobuf for a struct)")
        if fmt == "json" and not isinstance(kind, (T.StructType, T.MapType, T.ArrayType, T.StringType)):
            fail(f"column {name!r} must be a struct, map or array for the json format, not {kind.simpleString()}")
        if fmt == "protobuf" and not isinstance(kind, T.StructType):
            fail(f"column {name!r} must be a struct for the protobuf format, not {kind.simpleString()}")

    if value_column not in fields:
        fail(f"the eosbroker sink needs a {value_column!r} column")
    encodable(value_column, value_format, "value.format")
    if key_column in fields:
        encodable(key_column, key_format, "key.format")
    if headers_column in fields:
        kind = fields[headers_column]
        element = kind.elementType if isinstance(kind, T.ArrayType) else None
        names = {f.name: f.dataType for f in element.fields} if isinstance(element, T.StructType) else {}
        if not (isinstance(names.get("key"), T.StringType)
                and isinstance(names.get("value"), (T.BinaryType, T.StringType))):
            fail(f"column {headers_column!r} must be array<struct<key: string, value: binary>>, "
                 f"not {kind.simpleString()}")
    if partition_column in fields and not isinstance(fields[partition_column], T.IntegerType):
        fail(f"column {partition_column!r} must be int, not {fields[partition_column].simpleString()}")
    if topic_option is None:
        if topic_column not in fields:
            fail("set the 'topic' option or give the input a 'topic' column")
        if not isinstance(fields[topic_column], T.StringType):
            fail(f"column {topic_column!r} must be string, not {fields[topic_column].simpleString()}")
