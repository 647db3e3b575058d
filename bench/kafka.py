"""Starts Apache Kafka (the reference broker of tests/reference) for the bench: formats a
KRaft log dir, then becomes the JVM, so the bench measures and stops the broker itself.

    python bench/kafka.py PORT DATA_DIR
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.reference.kafka_broker import KafkaBroker  # noqa: E402

if __name__ == "__main__":
    KafkaBroker(Path(sys.argv[2])).exec_in_place(int(sys.argv[1]))
