"""Version profiles: each emulated release advertises that release's API versions (capped
at what is implemented) and features."""

import pytest

from broker.wire.server import HANDLERS
from protocol.request_wire import KAFKA_4_0, PROFILE_MAXIMA, ApiTable


@pytest.mark.parametrize("profile", ["2.4", "2.8", "3.6", "3.9", "4.0", "4.2", "4.4"])
def test_every_profile_is_known_and_within_the_implemented_ranges(profile):
    table = ApiTable(set(HANDLERS), profile)
    for key, r in table.ranges.items():
        assert key in HANDLERS
        assert r.advertised_min <= r.accepted_min <= r.max <= KAFKA_4_0[key][3]


def test_releases_differ_as_kafka_did():
    maxima = {p: {k: r.max for k, r in ApiTable(set(HANDLERS), p).ranges.items()} for p in PROFILE_MAXIMA}
    assert [maxima[p][0] for p in ("2.4", "2.8", "3.6", "3.9", "4.0")] == [8, 9, 9, 11, 12]  # Produce
    assert [maxima[p][1] for p in ("2.4", "2.8", "3.6", "3.9", "4.0")] == [11, 12, 15, 17, 17]  # Fetch
    assert 65 not in maxima["2.8"] and maxima["3.6"][65] == 0  # DescribeTransactions came with 3.0
    assert 50 not in maxima["2.4"] and maxima["2.8"][50] == 0  # SCRAM admin APIs came with 2.7


def test_transaction_version_feature_from_4_0():
    assert ApiTable(set(HANDLERS), "3.9").features == {}
    assert ApiTable(set(HANDLERS), "4.0").features == {"transaction.version": 2}
    assert ApiTable(set(HANDLERS), "4.4").features == {"transaction.version": 2, "share.version": 1,
                                                       "streams.version": 1}
    # EndTxn v5 (the epoch bump) and KIP-848's APIs only where the feature/protocol exists.
    assert ApiTable(set(HANDLERS), "3.9").ranges[26].max == 4
    assert ApiTable(set(HANDLERS), "4.4").ranges[26].max == 5
    assert 68 not in ApiTable(set(HANDLERS), "3.9").ranges and ApiTable(set(HANDLERS), "4.0").ranges[68].max == 1


def test_share_groups_from_4_2():
    """KIP-932's APIs and share.version 1 only where Kafka has share groups on (4.2+)."""
    share_apis = {76: 1, 77: 1, 78: 2, 79: 2}
    for profile in ("3.9", "4.0"):
        table = ApiTable(set(HANDLERS), profile)
        assert not share_apis.keys() & table.ranges.keys()
        assert "share.version" not in table.features
    for profile in ("4.2", "4.4"):
        table = ApiTable(set(HANDLERS), profile)
        assert {k: table.ranges[k].max for k in share_apis} == share_apis
        assert table.features["share.version"] == 1 and table.supported_features["share.version"] == 1


def test_streams_groups_from_4_2():
    """KIP-1071's APIs and streams.version 1 where Kafka 4.2 finalizes it (metadata version
    4.2-IV1 bootstraps it), v0 there; KIP-1331's v1 and StreamsGroupTopologyDescriptionUpdate
    (93) in the 4.4 profile, as Kafka 4.4 advertises them."""
    for profile in ("3.9", "4.0"):
        table = ApiTable(set(HANDLERS), profile)
        assert not {88, 89, 93} & table.ranges.keys() and "streams.version" not in table.features
    for profile, maxima in (("4.2", {88: 0, 89: 0}), ("4.4", {88: 1, 89: 1, 93: 0})):
        table = ApiTable(set(HANDLERS), profile)
        assert {k: table.ranges[k].max for k in (88, 89, 93) if k in table.ranges} == maxima
        assert table.features["streams.version"] == 1 and table.supported_features["streams.version"] == 1


def test_transaction_version_finalized_by_the_operator():
    # as after kafka-features.sh downgrade --feature transaction.version=1: clients that
    # read the finalized level (the Java client) end transactions with EndTxn v4
    table = ApiTable(set(HANDLERS), "4.4", transaction_version=1)
    assert table.features == {"transaction.version": 1, "share.version": 1, "streams.version": 1}
    assert table.supported_features == {"transaction.version": 2, "share.version": 1, "streams.version": 1}
    assert table.ranges[26].max == 5  # the broker still serves v5, as Kafka does for any client
    assert ApiTable(set(HANDLERS), "4.4", transaction_version=0).features == {"share.version": 1,
                                                                               "streams.version": 1}
    with pytest.raises(ValueError, match="supports 0 to 2"):
        ApiTable(set(HANDLERS), "4.4", transaction_version=3)
    with pytest.raises(ValueError, match="no transaction.version feature"):
        ApiTable(set(HANDLERS), "3.9", transaction_version=1)


def test_unknown_profile_is_refused():
    with pytest.raises(ValueError, match="unknown emulate.kafka.version"):
        ApiTable(set(HANDLERS), "3.5")
