"""The README's API table says what the broker serves: every API Kafka 4.4 advertises is
listed, and each row's eosbroker range and status are the ones the API table (profile
4.4) answers ApiVersions with, so the table cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

from broker.wire.server import HANDLERS
from protocol.request_wire import KAFKA_4_0, ApiTable

README = Path(__file__).resolve().parents[2] / "README.md"
ROW = re.compile(r"^\| (\d+) \| (\w+) \| (\d+)-(\d+) \| ([^|]+) \| ([^|]+) \|$")
SHARE_GROUP_APIS = {76, 77, 78, 79, 90, 91, 92}
SHARE_STATE_APIS = {83, 84, 85, 86, 87}


def _rows() -> dict[int, tuple[str, int, int, str, str]]:
    rows = {}
    for line in README.read_text().splitlines():
        m = ROW.match(line)
        if m:
            key, name, lo, hi, ours, status = m.groups()
            rows[int(key)] = (name, int(lo), int(hi), ours.strip(), status.strip())
    return rows


def test_every_served_api_is_listed_with_its_range_and_status():
    rows = _rows()
    table = ApiTable(set(HANDLERS), "4.4")
    assert set(table.ranges) <= set(rows)
    for key, (name, _lo, kafka_max, ours, status) in rows.items():
        served = table.get(key)
        if served is None:
            assert (ours, status.startswith("missing")) == ("-", True), (key, name)
            continue
        assert name == served.name
        expected = f"{served.accepted_min}-{served.max}"
        if served.advertised_min < served.accepted_min:
            expected += f" (advertised from {served.advertised_min})"
        assert ours == expected, (key, name)
        assert status.startswith("implemented"), (key, name)
        assert ("up to v" in status) == (served.max < kafka_max), (key, name, status)
        if served.max < kafka_max:
            assert f"implemented up to v{served.max}" in status, (key, name, status)


def test_kafka_apis_and_share_groups_are_listed():
    rows = _rows()
    assert set(KAFKA_4_0) <= set(rows)
    for key in SHARE_GROUP_APIS:
        assert rows[key][4] == "implemented (4.2 and 4.4 profiles)", key
    for key in SHARE_STATE_APIS:
        assert rows[key][4] == "implemented (4.2 and 4.4 profiles; sent between nodes to the share coordinator)", key
