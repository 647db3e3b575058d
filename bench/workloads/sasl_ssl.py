"""SASL_SSL beside PLAINTEXT: the produce and transactions workloads through each of two
listeners of one broker of its own, a PLAINTEXT one and a SASL_SSL one (TLS with the
certificates of ``eosbroker certs``, PLAIN login as alice; Apache Kafka: the reference
fixture's SASL_SSL listener, the same certificates and users).

Produce, then transactions, each as its own workload times it (the connection's TLS
handshake and login come in the untimed warm-up / init_transactions), twice over each
listener in the order PLAINTEXT, SASL_SSL, SASL_SSL, PLAINTEXT: a drift through the run
(a JVM compiling its hot code through the first passes, the machine's other load) falls
on both listeners alike instead of on whichever went first. Each listener's figure is
the mean of its two passes. Topics are made and read back over PLAINTEXT. The ratios
are SASL_SSL's figure over PLAINTEXT's in the same broker process.
"""

from __future__ import annotations

from bench.brokers import RunningBroker
from bench.workloads import produce, transactions
from bench.workloads.base import Metric, RunContext, Target, Workload

PLAINTEXT, SASL_SSL = "PLAINTEXT", "SASL_SSL"


# Each listener twice, mirrored, so a linear drift through the run cancels in the ratios.
ORDER = (PLAINTEXT, SASL_SSL, SASL_SSL, PLAINTEXT)


def run(ctx: RunContext) -> dict[str, float]:
    with RunningBroker(ctx.broker.kind, ctx.broker.startup_timeout_s, sasl_ssl=True) as broker:
        own = RunContext(broker, ctx.settings, notes=ctx.notes)
        configs = {PLAINTEXT: {}, SASL_SSL: broker.sasl_ssl_client("alice")}
        passes: dict[str, list[float]] = {}

        def keep(listener: str, figures: dict[str, float], *names: str) -> None:
            for name in names:
                passes.setdefault(f"{listener} {name}", []).append(figures[name])

        for n, listener in enumerate(ORDER):
            _topic, figures = produce.produce_to_fresh_topic(
                own, f"produce-{listener.lower().replace('_', '-')}-{n}",
                {"enable.idempotence": False, **configs[listener]})
            keep(listener, figures, "records/s", "CPU us/record")
        for listener in ORDER:
            keep(listener, transactions.run(own, configs[listener]), "txn/s", "CPU ms/txn")
        broker.check_alive()
    out = {name: sum(values) / len(values) for name, values in passes.items()}
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
