"""A Spark driver for test_spark_driver_crash, run as a process of its own so the test can
SIGKILL it (JVM and Python workers) and start it again.

python -m tests.spark.driver_job stream BOOTSTRAP TOPIC PREFIX INPUT_DIR CHECKPOINT [POINT:BATCH]
python -m tests.spark.driver_job batch BOOTSTRAP TOPIC PREFIX ROWS WRITE_ID [POINT:BATCH]

stream: JSON files (one per micro-batch) -> the eosbroker sink, until the input is
drained (Trigger.AvailableNow). batch: ROWS rows under write.id WRITE_ID. Rows are
keyed, in two (stream) or three (batch) tasks, so a batch commits several transactions.
With POINT:BATCH the sink's test hook SIGKILLs this process group at that point of that
batch's commit (before-decision, during-commit, after-committed); the script must then
run as a process group leader (start_new_session=True). SPARK_DRIVER_JOB_OPTIONS (JSON)
adds options to the writer (a secured listener's kafka.security.protocol, ...).
"""

import json
import os
import sys

from spark_client.options import HOOK_KILL_DRIVER
from tests.spark.helpers import spark_session


def main() -> None:
    mode, bootstrap, topic, prefix, source, scope = sys.argv[1:7]
    spark = spark_session("local[2]")
    if mode == "stream":
        rows = (spark.readStream.schema("id long, payload string").option("maxFilesPerTrigger", 1).json(source)
                .repartition(2).selectExpr("cast(id as string) as key", "payload as value"))
        writer = rows.writeStream.option("checkpointLocation", scope).trigger(availableNow=True)
    else:
        rows = spark.range(int(source)).repartition(3).selectExpr(
            "cast(id as string) as key", "concat('row-', cast(id as string)) as value")
        writer = rows.write.mode("append").option("write.id", scope)
    writer = (writer.format("eosbroker").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
              .option("transactional.id.prefix", prefix))
    for key, value in json.loads(os.environ.get("SPARK_DRIVER_JOB_OPTIONS", "{}")).items():
        writer = writer.option(key, value)
    if len(sys.argv) > 7:
        assert os.getpgrp() == os.getpid(), "the kill hook needs a process group of our own"
        writer = writer.option(HOOK_KILL_DRIVER, f"{sys.argv[7]}:{os.getpgrp()}")
    if mode == "stream":
        writer.start().awaitTermination()
    else:
        writer.save()
    print("job done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
