"""PySpark data source "eosbroker" (exactly-once sink, read_committed source) and the
small wire-level client it uses. ``register(spark)`` makes the format available;
``create_topic`` makes the output topic (the sink never creates topics)."""


def register(spark) -> None:
    from spark_client.datasource import EosBrokerDataSource

    _check_local_workers(spark)
    spark.dataSource.register(EosBrokerDataSource)


def _check_local_workers(spark) -> None:
    """In local mode, Spark's Python workers run PYSPARK_PYTHON (default python3): fail
    now, clearly, if that interpreter cannot import spark_client, rather than in the
    first task with "No module named 'spark_client'"."""
    import subprocess
    import sys

    context = spark.sparkContext
    if not context.master.startswith("local"):
        return
    worker_python = context.pythonExec
    try:
        found = subprocess.run([worker_python, "-c", "import spark_client, pyarrow"], capture_output=True,
                               timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        found = False
    if not found:
        raise RuntimeError(
            f"Spark's Python workers run {worker_python!r}, which cannot import spark_client and pyarrow. Set "
            f"os.environ['PYSPARK_PYTHON'] = {sys.executable!r} (this interpreter) before the SparkSession "
            f"starts, or install eosbroker[spark] for {worker_python!r}.")


def create_topic(bootstrap: str, topic: str, partitions: int = 1, configs: dict[str, str] | None = None,
                 options: dict[str, str] | None = None) -> None:
    """Creates ``topic`` unless it exists (an existing topic keeps its partitions and settings).
    ``options``: the data source's security options (kafka.security.protocol, ...), if any."""
    from spark_client.security import ClientSecurity
    from spark_client.wire import Client

    with Client(bootstrap, security=ClientSecurity.parse(options or {})) as cluster:
        cluster.create_topic(topic, partitions, configs)
