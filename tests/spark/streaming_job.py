"""A streaming query for test_spark_streaming: JSON files (one per micro-batch) -> the
eosbroker sink, run until the input is drained (Trigger.AvailableNow).

python -m tests.spark.streaming_job BOOTSTRAP INPUT_DIR CHECKPOINT TOPIC PREFIX [KILL_AFTER_DECISION_BATCH]

With a batch number, the sink's test hook SIGKILLs this whole process group (driver
JVM and Python workers) right after that batch's commit decision is written; the
script must then run as a process group leader (start_new_session=True).
"""

import os
import sys

from tests.spark.helpers import spark_session
from spark_client.options import HOOK_KILL_AFTER_DECISION


def main() -> None:
    bootstrap, input_dir, checkpoint, topic, prefix = sys.argv[1:6]
    spark = spark_session("local[2]")
    lines = (spark.readStream.schema("id long, payload string").option("maxFilesPerTrigger", 1).json(input_dir)
             .selectExpr("cast(id as string) as key", "payload as value"))
    writer = (lines.writeStream.format("eosbroker").option("checkpointLocation", checkpoint)
              .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
              .option("transactional.id.prefix", prefix).trigger(availableNow=True))
    if len(sys.argv) > 6:
        assert os.getpgrp() == os.getpid(), "the kill hook needs a process group of our own"
        writer = writer.option(HOOK_KILL_AFTER_DECISION, f"{sys.argv[6]}:{os.getpgrp()}")
    query = writer.start()
    query.awaitTermination()
    print(f"query {query.id} done", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
