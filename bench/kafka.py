"""Starts Apache Kafka (the reference broker of tests/reference) for the bench: formats a
KRaft log dir, then becomes the JVM, so the bench measures and stops the broker itself.

    python bench/kafka.py PORT DATA_DIR [SASL_SSL_PORT CERTS_DIR]

With SASL_SSL_PORT, a SASL_SSL listener there too (the reference fixture's, with the
certificates ``eosbroker certs`` wrote into CERTS_DIR).

The JVMs get the options Kafka's own scripts give them (bin/kafka-run-class.sh, and
bin/kafka-server-start.sh's heap for the broker), not the tests' fast-starting C1-only
ones: the bench compares Kafka as it ships. GC logging and JMX are left out.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.reference.kafka_broker import KafkaBroker, die_with_parent  # noqa: E402

# KAFKA_JVM_PERFORMANCE_OPTS of bin/kafka-run-class.sh
PERFORMANCE = ("-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
               "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15")
STORAGE_TOOL_JVM = ("-Xmx256M", *PERFORMANCE)  # kafka-run-class.sh's heap (kafka-storage.sh format)
BROKER_JVM = ("-Xmx1G", "-Xms1G", *PERFORMANCE)  # kafka-server-start.sh's heap
# The reference fixture shortens this for the differential tests; the bench keeps Kafka's default.
DEFAULTS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": 10_000}


def _properties(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def broker_for(workdir: Path, **secured) -> tuple[KafkaBroker, bool]:
    """A broker for ``workdir`` and whether its log dir is formatted already. On a restart
    (the bench spawns this script again on the same port and dir) it keeps the formatted
    cluster id and the controller port of the quorum, and the start skips the storage
    tool's JVM, as a restarted Kafka does."""
    broker = KafkaBroker(workdir, overrides=DEFAULTS, **secured)
    formatted = _properties(workdir / "data" / "meta.properties").get("cluster.id")
    voters = _properties(workdir / "server.properties").get("controller.quorum.voters")
    if formatted and voters:
        broker.cluster_id = formatted
        broker.controller_port = int(voters.rpartition(":")[2])
        return broker, True
    return broker, False


if __name__ == "__main__":
    die_with_parent()  # kept across exec: a bench that is killed leaves no JVM behind
    secured = {}
    if len(sys.argv) > 3:
        from broker.security.certs import DEFAULT_PASSWORD, Certificates

        certs = Certificates(Path(sys.argv[4]), DEFAULT_PASSWORD, (), ())  # the bench wrote them with these
        secured = {"secured": True, "secured_ports": {"SASL_SSL": int(sys.argv[3])}, "certs": certs}
    broker, formatted = broker_for(Path(sys.argv[2]), **secured)
    broker.exec_in_place(int(sys.argv[1]), format_jvm_options=STORAGE_TOOL_JVM, broker_jvm_options=BROKER_JVM,
                         format_log_dir=not formatted)
