"""The client's floor: transactions/s of the bench's transactional producer against an
instant responder, beside eosbroker and Tansu.

    python -m bench.client_floor [--runs 3] [--transactions 2000] [--timeline 400]
                                 [--cost-us 20,40,60]

The responder is a measuring instrument, NOT a broker: it stores nothing and checks
nothing, and every transaction "commits". It is an asyncio server on uvloop on
127.0.0.1 that answers exactly the requests librdkafka's transactional producer sends
(ApiVersions, Metadata, FindCoordinator, InitProducerId, AddPartitionsToTxn, Produce,
EndTxn) with answers encoded once at start by the project's protocol package, for one
topic of 2 partitions led by itself; per request it only patches the correlation id
(Produce answers are prebuilt per partition, and the request is decoded to pick one).
Any other request closes the connection with a log line. It advertises eosbroker's
ApiVersions, so librdkafka picks the same versions and features as against eosbroker.

Whatever the producer reaches against it is the client's own ceiling on this machine:
a broker that answered in no time at all would get that and no more. With ``--cost-us``
the comparison also runs the responder spending a fixed time on the CPU before each
answer (a busy wait, as a broker's handling would be), once per cost: the curve says how
much a broker may spend per request and still reach 90% of the floor. The comparison
runs the transactions workload's producer (``run_transactions``) against the
responder, eosbroker and Tansu, alternating, and prints per broker the median txn/s,
its ratio to Tansu, and what issue 16's "transactions/s >= 1.2x Tansu" leaves a
broker: the ms per transaction that target allows minus the ms the client takes on
its own. With ``--timeline N`` it also prints librdkafka's round trip per API against
the responder (bench/timeline.py's producer and log summary).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path

from broker.security.acls import NOT_REQUESTED
from broker.wire.server import HANDLERS
from protocol import answer_wire, request_wire
from protocol.request_wire import (
    ApiTable,
    flexible_from,
    FrameDecoder,
    FrameError,
    peek_request_header,
    skip_tagged_fields,
)
from protocol.client import response_header_size

TOPIC = "client-floor"
PARTITIONS = 2
NODE_ID = 0
PRODUCER_ID = 1000
PRODUCE, METADATA, FIND_COORDINATOR, API_VERSIONS = 0, 3, 10, 18
INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 22, 24, 26
_CORRELATION = struct.Struct(">i")
_MAX_FRAME = 1 << 20


def _answers(host: str, port: int) -> dict[int, dict]:
    """Per API, the response fields (Kafka's names) the producer is answered with."""
    apis = ApiTable(set(HANDLERS))
    partitions = [{"partition_index": p, "leader_id": NODE_ID, "leader_epoch": 0, "replica_nodes": [NODE_ID],
                   "isr_nodes": [NODE_ID], "offline_replicas": []} for p in range(PARTITIONS)]
    producer = {"error_code": 0, "producer_id": PRODUCER_ID, "producer_epoch": 0}
    return {
        API_VERSIONS: {
            "error_code": 0,
            "api_keys": [{"api_key": r.api_key, "min_version": r.advertised_min, "max_version": r.max}
                         for r in apis.ranges.values()],
            "supported_features": [{"name": n, "min_version": 0, "max_version": v} for n, v in apis.features.items()],
            "finalized_features_epoch": 1 if apis.features else -1,
            "finalized_features": [{"name": n, "min_version_level": v, "max_version_level": v}
                                   for n, v in apis.features.items()],
        },
        METADATA: {
            "brokers": [{"node_id": NODE_ID, "host": host, "port": port, "rack": None}],
            "cluster_id": "client-floor", "controller_id": NODE_ID, "error_code": 0,
            "topics": [{"error_code": 0, "name": TOPIC, "topic_id": uuid.UUID(int=1), "is_internal": False,
                        "partitions": partitions, "topic_authorized_operations": NOT_REQUESTED}],
            "cluster_authorized_operations": NOT_REQUESTED,
        },
        FIND_COORDINATOR: {"error_code": 0, "error_message": None, "node_id": NODE_ID, "host": host, "port": port},
        INIT_PRODUCER_ID: producer,
        ADD_PARTITIONS_TO_TXN: {"results_by_topic_v3_and_below": [
            {"name": TOPIC, "results_by_partition": [{"partition_index": p, "partition_error_code": 0}
                                                     for p in range(PARTITIONS)]}]},
        END_TXN: producer,
    }


def _produce_answer(partition: int) -> dict:
    return {"responses": [{"name": TOPIC, "partition_responses": [
        {"index": partition, "error_code": 0, "base_offset": 0, "log_append_time": None, "log_start_offset": 0,
         "record_errors": [], "error_message": None}]}]}


def _frame(api_key: int, version: int, data: dict) -> bytes:
    """A whole response frame with correlation id 0: size, header, body."""
    body = answer_wire.encode(answer_wire.build_response(api_key, version, data))
    header = b"\0\0\0\0" + (b"\0" if response_header_size(api_key, version) == 5 else b"")
    return struct.pack(">i", len(header) + len(body)) + header + body


def prebuilt_frames(host: str, port: int) -> dict[tuple, bytes]:
    """Every answer, keyed (api_key, version) or, for Produce, (api_key, version, partition).

    Only the versions whose answer does not depend on the request are built: FindCoordinator
    v4+ and AddPartitionsToTxn v4+ (batched by key) are left out, as librdkafka uses neither."""
    apis = ApiTable(set(HANDLERS))
    frames = {}
    for api_key, data in _answers(host, port).items():
        r = apis.get(api_key)
        top = {FIND_COORDINATOR: 3, ADD_PARTITIONS_TO_TXN: 3}.get(api_key, r.max)
        for version in range(r.advertised_min, top + 1):
            frames[(api_key, version)] = _frame(api_key, version, data)
    r = apis.get(PRODUCE)
    for version in range(r.accepted_min, r.max + 1):
        for p in range(PARTITIONS):
            frames[(PRODUCE, version, p)] = _frame(PRODUCE, version, _produce_answer(p))
    return frames


class _Responder(asyncio.Protocol):
    def __init__(self, frames: dict[tuple, bytes], cost_s: float = 0.0) -> None:
        self.frames = frames
        self.cost_s = cost_s
        self.decoder = FrameDecoder(_MAX_FRAME)
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.decoder.feed(data)
        out = []
        try:
            while (request := self.decoder.next_frame()) is not None:
                out.append(self.answer(request))
        except (FrameError, LookupError, request_wire.DecodeError) as e:
            print(f"client-floor responder: closing the connection: {e}", file=sys.stderr, flush=True)
            self.transport.close()
            return
        self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def answer(self, request: bytes) -> bytearray:
        if self.cost_s:
            done = time.perf_counter() + self.cost_s
            while time.perf_counter() < done:
                pass
        header, pos = peek_request_header(request)
        key = (header.api_key, header.api_version)
        if header.api_key == PRODUCE:  # the one answer that names what the request carried
            if header.api_version >= flexible_from(PRODUCE):
                pos = skip_tagged_fields(request, pos)
            body = request_wire.decode_request(PRODUCE, header.api_version, request, pos)
            key += (body.topic_data[0].partition_data[0].index,)
        frame = self.frames.get(key)
        if frame is None:
            raise LookupError(f"no answer for api key {header.api_key} v{header.api_version}")
        out = bytearray(frame)
        _CORRELATION.pack_into(out, 4, header.correlation_id)
        return out


async def serve(host: str, port: int, cost_us: int = 0) -> None:
    frames = prebuilt_frames(host, port)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Responder(frames, cost_us / 1e6), host, port)
    async with server:
        await server.serve_forever()


def responder_command(port: int, data_dir: Path, sasl_ssl=None, cost_us: int = 0) -> list[str]:  # plaintext only
    return [sys.executable, str(Path(__file__).resolve()), "--serve", str(port),  # as a script: any working dir
            "--cost-us", str(cost_us)]


# -- the comparison ---------------------------------------------------------------------


def responder_kind(cost_us: int = 0):
    """The responder as a ``bench.brokers.BrokerKind``: spawned, probed and stopped as a
    broker is; ``cost_us``: the time it spends on the CPU before each answer."""
    from bench.brokers import BrokerKind

    if not cost_us:
        return BrokerKind(_responder_name(0), responder_command)
    return BrokerKind(_responder_name(cost_us), functools.partial(responder_command, cost_us=cost_us))


def _responder_name(cost_us: int) -> str:
    return "responder" if not cost_us else f"responder+{cost_us}us"


def _kinds(costs: list[int]) -> dict:
    from bench.brokers import BROKERS

    kinds = (responder_kind(), BROKERS["eosbroker"], BROKERS["tansu"], *(responder_kind(c) for c in costs))
    return {kind.name: kind for kind in kinds}  # the order runs alternate in


def one_run(kind, transactions: int) -> tuple[float, float]:
    """(txn/s, broker CPU ms per transaction) of the transactions workload's producer."""
    from bench.brokers import RunningBroker
    from bench.workloads.base import RunContext, Settings
    from bench.workloads.produce import create_topic
    from bench.workloads.transactions import run_transactions

    with RunningBroker(kind) as broker:
        ctx = RunContext(broker, Settings(records=0, record_size=100, timeout_s=300.0, transactions=transactions))
        if not kind.name.startswith(_responder_name(0)):  # the responder answers Metadata for its one topic and nothing else
            create_topic(broker.bootstrap, TOPIC, 30.0, partitions=PARTITIONS)
        cpu_before = broker.sampler.cpu_seconds()
        elapsed, _latencies = run_transactions(ctx, TOPIC, transactions)
        cpu_ms = (broker.sampler.cpu_seconds() - cpu_before) * 1000 / transactions
        broker.check_alive()
    return transactions / elapsed, cpu_ms


def timeline(transactions: int) -> str:
    """librdkafka's own view of each request against the responder (bench/timeline.py)."""
    from bench import timeline as tl
    from bench.brokers import RunningBroker

    with RunningBroker(responder_kind()) as broker, tempfile.TemporaryDirectory() as d:
        log_path = Path(d) / "timeline-responder.log"
        tl.log_producer(broker.bootstrap, TOPIC, transactions, log_path)
        return tl.summarise("responder", log_path)


def compare(runs: int, transactions: int, costs: list[int] = ()) -> str:
    kinds = _kinds(list(costs))
    rates: dict[str, list[float]] = {name: [] for name in kinds}
    cpu: dict[str, list[float]] = {name: [] for name in kinds}
    for run in range(1, runs + 1):
        for name, kind in kinds.items():
            rate, cpu_ms = one_run(kind, transactions)
            rates[name].append(rate)
            cpu[name].append(cpu_ms)
            print(f"run {run} {name:16s} {rate:7.0f} txn/s  broker CPU {cpu_ms:.2f} ms/txn", flush=True)
    median = {name: statistics.median(v) for name, v in rates.items()}
    floor = median[_responder_name(0)]
    out = [f"{transactions} transactions per run, medians of {runs} alternating runs "
           f"(responder+N us: spending N us on the CPU per request):"]
    for name in kinds:
        out.append(f"  {name:16s} {median[name]:7.0f} txn/s  {median[name] / floor:.2f} of the floor"
                   f"  {median[name] / median['tansu']:.2f}x tansu"
                   f"  ({1000 / median[name]:.2f} ms/txn; broker CPU {statistics.median(cpu[name]):.2f} ms/txn)"
                   f"  runs: {', '.join(f'{r:.0f}' for r in rates[name])}")
    share = median["eosbroker"] / floor
    out.append(f"[{'PASS' if share >= 0.9 else 'FAIL'}] transactions/s >= 90% of the client floor "
               f"({0.9 * floor:.0f} txn/s): eosbroker reaches {share:.2f} of the floor, "
               f"tansu {median['tansu'] / floor:.2f}")
    if costs:
        budget = cost_for_share(0.9, {0: floor, **{c: median[_responder_name(c)] for c in costs}}, floor)
        out.append("a broker reaches 90% of the floor while it spends at most "
                   + (f"~{budget:.0f} us per request on its critical path" if budget is not None
                      else f"(not bracketed by the costs measured: {', '.join(map(str, costs))} us)"))
    allowed_ms = 1000 / (1.2 * median["tansu"])
    floor_ms = 1000 / floor
    out.append(f"1.2x tansu = {1.2 * median['tansu']:.0f} txn/s needs {allowed_ms:.2f} ms per transaction; "
               f"the client alone, against an instant broker, takes {floor_ms:.2f} ms "
               f"({median['responder'] / median['tansu']:.2f}x tansu): "
               f"{allowed_ms - floor_ms:.2f} ms per transaction left for a broker's critical path")
    return "\n".join(out)


def cost_for_share(share: float, rates: dict[int, float], floor: float) -> float | None:
    """The per-request cost (us) at which the rate falls to ``share`` of ``floor``,
    interpolated between the two measured costs around it (None: none brackets it)."""
    target = share * floor
    points = sorted(rates.items())
    for (c0, r0), (c1, r1) in zip(points, points[1:]):
        if r0 >= target >= r1 and r0 != r1:
            return c0 + (c1 - c0) * (r0 - target) / (r0 - r1)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--transactions", type=int, default=2000)
    parser.add_argument("--timeline", type=int, default=0, metavar="N",
                        help="also print the per-API round trips of N transactions against the responder")
    parser.add_argument("--cost-us", default="", metavar="N,N,...",
                        help="also run the responder spending each of these us on the CPU per request")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        costs = sorted({int(c) for c in args.cost_us.split(",") if c.strip()})
    except ValueError:
        parser.error(f"--cost-us takes whole microseconds, comma-separated: {args.cost_us!r}")
    if any(c <= 0 for c in costs) and args.serve is None:
        parser.error("--cost-us: each cost must be at least 1 us")
    if args.serve is not None:
        import uvloop

        uvloop.run(serve("127.0.0.1", args.serve, costs[0] if costs else 0))
        return 0
    print(compare(args.runs, args.transactions, costs), flush=True)
    if args.timeline:
        print(timeline(args.timeline), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
