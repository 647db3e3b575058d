"""SASL_SSL beside PLAINTEXT: the produce and transactions workloads through each of two
listeners of one broker of its own, a PLAINTEXT one and a SASL_SSL one (TLS with the
certificates of ``eosbroker certs``, PLAIN login as alice; Apache Kafka: the reference
fixture's SASL_SSL listener, the same certificates and users).

In order: produce over PLAINTEXT, then over SASL_SSL, then transactions over each, each
as its own workload times it (the connection's TLS handshake and login come in the
untimed warm-up / init_transactions). Topics are made and read back over PLAINTEXT.
The ratios are SASL_SSL's figure over PLAINTEXT's in the same broker process.
"""

from __future__ import annotations

from bench.brokers import RunningBroker
from bench.workloads import produce, transactions
from bench.workloads.base import Metric, RunContext, Target, Workload

PLAINTEXT, SASL_SSL = "PLAINTEXT", "SASL_SSL"


def run(ctx: RunContext) -> dict[str, float]:
    with RunningBroker(ctx.broker.kind, ctx.broker.startup_timeout_s, sasl_ssl=True) as broker:
        own = RunContext(broker, ctx.settings, notes=ctx.notes)
        secured = broker.sasl_ssl_client("alice")
        out: dict[str, float] = {}
        for listener, config in ((PLAINTEXT, {}), (SASL_SSL, secured)):
            _topic, figures = produce.produce_to_fresh_topic(
                own, f"produce-{listener.lower().replace('_', '-')}", {"enable.idempotence": False, **config})
            out[f"{listener} records/s"] = figures["records/s"]
            out[f"{listener} CPU us/record"] = figures["CPU us/record"]
        for listener, config in ((PLAINTEXT, {}), (SASL_SSL, secured)):
            figures = transactions.run(own, config)
            out[f"{listener} txn/s"] = figures["txn/s"]
            out[f"{listener} CPU ms/txn"] = figures["CPU ms/txn"]
        broker.check_alive()
    out["SASL_SSL/PLAINTEXT records/s"] = out["SASL_SSL records/s"] / out["PLAINTEXT records/s"]
    out["SASL_SSL/PLAINTEXT txn/s"] = out["SASL_SSL txn/s"] / out["PLAINTEXT txn/s"]
    return out


WORKLOAD = Workload(
    name="sasl-ssl",
    description="produce and transactions over SASL_SSL (PLAIN) beside PLAINTEXT, one broker of its own",
    run=run,
    metrics=(
        Metric("PLAINTEXT records/s", "records/s", "higher", ",.0f"),
        Metric("SASL_SSL records/s", "records/s", "higher", ",.0f"),
        Metric("SASL_SSL/PLAINTEXT records/s", "ratio", "higher", ",.2f"),
        Metric("PLAINTEXT CPU us/record", "us", "lower", ",.3f"),
        Metric("SASL_SSL CPU us/record", "us", "lower", ",.3f"),
        Metric("PLAINTEXT txn/s", "transactions/s", "higher", ",.0f"),
        Metric("SASL_SSL txn/s", "transactions/s", "higher", ",.0f"),
        Metric("SASL_SSL/PLAINTEXT txn/s", "ratio", "higher", ",.2f"),
        Metric("PLAINTEXT CPU ms/txn", "ms", "lower", ",.2f"),
        Metric("SASL_SSL CPU ms/txn", "ms", "lower", ",.2f"),
    ),
    targets=(
        Target("SASL_SSL/PLAINTEXT records/s", "produce records/s over SASL_SSL >= 0.8x over PLAINTEXT", above=0.8),
        Target("SASL_SSL records/s", "produce records/s over SASL_SSL >= 1.0x kafka's", min_ratio_to_peer=1.0,
               peer="kafka"),
        Target("SASL_SSL/PLAINTEXT txn/s", "transactions/s over SASL_SSL >= 0.8x over PLAINTEXT", above=0.8),
        Target("SASL_SSL txn/s", "transactions/s over SASL_SSL >= 1.0x kafka's", min_ratio_to_peer=1.0,
               peer="kafka"),
    ),
    brokers=("eosbroker", "kafka"),
    why_only="the bench starts tansu with a PLAINTEXT listener only",
)
