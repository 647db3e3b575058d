"""The table of API keys and the version ranges the broker supports.

``advertised_min`` can be lower than ``accepted_min``: librdkafka < 2.11.1 enables
features only when the broker's range contains exact old versions (Produce 2..2,
OffsetCommit 1..2, ...), so, like Kafka 4 (KAFKA-18659), we advertise them and
reject the removed versions when a request actually uses them.

Version profiles (``emulate.kafka.version``) cap the maxima at what that Kafka
release advertised, so clients that infer the broker version from ApiVersions
(kafka-python) behave as they would against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.index import api_key_map


@dataclass(frozen=True, slots=True)
class ApiRange:
    """The versions of one API a broker advertises, accepts and serves."""

    api_key: int
    name: str
    advertised_min: int
    accepted_min: int
    max: int

    def accepts(self, version: int) -> bool:
        return self.accepted_min <= version <= self.max

    def flexible(self, version: int) -> bool:
        """Whether this version uses request header v2 / response header v1."""
        return flexible_from(self.api_key) <= version


# First version with flexible (tagged-field) headers, from Kafka's message definitions
# ("flexibleVersions"); tests check it against kio's schemas. Absent: never flexible.
FLEXIBLE_FROM: dict[int, int] = {
    0: 9, 1: 12, 2: 6, 3: 9, 8: 8, 9: 6, 10: 3, 11: 6, 12: 4, 13: 4, 14: 4, 15: 5, 16: 3, 18: 3,
    19: 5, 20: 4, 21: 2, 22: 2, 23: 4, 24: 3, 25: 3, 26: 3, 27: 1, 28: 3, 29: 2, 30: 2, 31: 2, 32: 4, 33: 2,
    35: 2, 36: 2, 37: 2, 42: 2, 43: 2, 44: 1, 45: 0, 46: 0, 50: 0, 51: 0, 60: 0, 61: 0, 65: 0, 66: 0, 68: 0, 69: 0,
    76: 0, 77: 0, 78: 0, 79: 0, 83: 0, 84: 0, 85: 0, 86: 0, 87: 0, 88: 0, 89: 0, 90: 0, 91: 0, 92: 0,
}
NEVER_FLEXIBLE = 1 << 15


def flexible_from(api_key: int) -> int:
    """The first version of an API that uses flexible (tagged-field) headers."""
    return FLEXIBLE_FROM.get(api_key, NEVER_FLEXIBLE)


# api_key: (name, advertised_min, accepted_min, max) as Apache Kafka 4.0 advertises.
KAFKA_4_0: dict[int, tuple[str, int, int, int]] = {
    0: ("Produce", 0, 3, 12),
    1: ("Fetch", 4, 4, 17),
    2: ("ListOffsets", 1, 1, 10),
    3: ("Metadata", 0, 0, 13),
    8: ("OffsetCommit", 1, 2, 9),
    9: ("OffsetFetch", 1, 1, 9),
    10: ("FindCoordinator", 0, 0, 6),
    11: ("JoinGroup", 0, 0, 9),
    12: ("Heartbeat", 0, 0, 4),
    13: ("LeaveGroup", 0, 0, 5),
    14: ("SyncGroup", 0, 0, 5),
    15: ("DescribeGroups", 0, 0, 5),
    16: ("ListGroups", 0, 0, 5),
    17: ("SaslHandshake", 0, 0, 1),
    18: ("ApiVersions", 0, 0, 4),
    19: ("CreateTopics", 2, 2, 7),
    20: ("DeleteTopics", 1, 1, 6),
    21: ("DeleteRecords", 0, 0, 2),
    22: ("InitProducerId", 0, 0, 5),
    23: ("OffsetForLeaderEpoch", 2, 2, 4),
    24: ("AddPartitionsToTxn", 0, 0, 5),
    25: ("AddOffsetsToTxn", 0, 0, 4),
    26: ("EndTxn", 0, 0, 5),  # v5: transaction version 2
    27: ("WriteTxnMarkers", 1, 1, 2),
    28: ("TxnOffsetCommit", 0, 0, 5),
    29: ("DescribeAcls", 1, 1, 3),
    30: ("CreateAcls", 1, 1, 3),
    31: ("DeleteAcls", 1, 1, 3),
    32: ("DescribeConfigs", 1, 1, 4),
    33: ("AlterConfigs", 0, 0, 2),
    35: ("DescribeLogDirs", 1, 1, 4),
    36: ("SaslAuthenticate", 0, 0, 2),
    37: ("CreatePartitions", 0, 0, 3),
    42: ("DeleteGroups", 0, 0, 2),
    43: ("ElectLeaders", 0, 0, 2),
    44: ("IncrementalAlterConfigs", 0, 0, 1),
    45: ("AlterPartitionReassignments", 0, 0, 0),
    46: ("ListPartitionReassignments", 0, 0, 0),
    47: ("OffsetDelete", 0, 0, 0),
    50: ("DescribeUserScramCredentials", 0, 0, 0),
    51: ("AlterUserScramCredentials", 0, 0, 0),
    60: ("DescribeCluster", 0, 0, 1),
    61: ("DescribeProducers", 0, 0, 0),
    65: ("DescribeTransactions", 0, 0, 0),
    66: ("ListTransactions", 0, 0, 2),  # v2 (id pattern filter) is from Kafka 4.1: admin clients filter with it
    68: ("ConsumerGroupHeartbeat", 0, 0, 1),  # KIP-848: served from Kafka 4.0
    69: ("ConsumerGroupDescribe", 0, 0, 1),
    # KIP-932 share groups: served from Kafka 4.2 (the 4.2 and 4.4 profiles here)
    76: ("ShareGroupHeartbeat", 1, 1, 1),
    77: ("ShareGroupDescribe", 1, 1, 1),
    78: ("ShareFetch", 1, 1, 2),  # v2: renew acknowledgements (KIP-1222)
    79: ("ShareAcknowledge", 1, 1, 2),
    83: ("InitializeShareGroupState", 0, 0, 0),  # 83-87: the share-state APIs between brokers
    84: ("ReadShareGroupState", 0, 0, 0),
    85: ("WriteShareGroupState", 0, 0, 1),  # v1: DeliveryCompleteCount
    86: ("DeleteShareGroupState", 0, 0, 0),
    87: ("ReadShareGroupStateSummary", 0, 0, 1),
    # KIP-1071 streams groups: served from Kafka 4.2, where streams.version 1 is finalized.
    # v1 (KIP-1331 topology descriptions) is not served: kio has v0 only.
    88: ("StreamsGroupHeartbeat", 0, 0, 0),
    89: ("StreamsGroupDescribe", 0, 0, 0),
    90: ("DescribeShareGroupOffsets", 0, 0, 1),
    91: ("AlterShareGroupOffsets", 0, 0, 0),
    92: ("DeleteShareGroupOffsets", 0, 0, 0),
}
# The share group (KIP-932, with its share-state APIs) and streams group (KIP-1071) APIs:
# off before the 4.2 profile.
APIS_FROM_4_2 = {76: None, 77: None, 78: None, 79: None, 83: None, 84: None, 85: None, 86: None, 87: None,
                 88: None, 89: None, 90: None, 91: None, 92: None}

# Maxima of older releases, for the version profile. Only keys that differ from 4.0
# and matter to clients' version inference are listed; missing APIs did not exist.
PROFILE_MAXIMA: dict[str, dict[int, int | None]] = {
    "4.0": dict(APIS_FROM_4_2),
    "2.4": {
        0: 8, 1: 11, 2: 5, 3: 9, 8: 8, 9: 6, 10: 3, 11: 6, 12: 4, 13: 4, 14: 4, 15: 5,
        16: 3, 17: 1, 18: 3, 19: 5, 20: 4, 21: 1, 22: 2, 24: 1, 25: 1, 26: 1, 27: 0, 28: 2,
        23: 3, 29: 1, 30: 1, 31: 1, 32: 2, 33: 1, 35: 1, 36: 1, 37: 1, 42: 2, 43: 2, 44: 1, 45: 0, 46: 0, 47: 0,
        50: None, 51: None, 60: None, 61: None, 65: None, 66: None, 68: None, 69: None, **APIS_FROM_4_2,
    },
}
# From each release's message definitions (validVersions), capped at what is implemented.
PROFILE_MAXIMA["2.8"] = {
    0: 9, 1: 12, 2: 6, 3: 11, 8: 8, 9: 7, 10: 3, 11: 7, 12: 4, 13: 4, 14: 5, 15: 5, 16: 4, 18: 3, 19: 7,
    20: 6, 21: 2, 22: 4, 24: 3, 25: 3, 26: 3, 27: 1, 28: 3, 29: 2, 30: 2, 31: 2, 32: 4, 33: 2, 35: 2, 37: 3,
    42: 2, 44: 1, 47: 0, 50: 0, 51: 0, 60: 0, 61: 0, 65: None, 66: None, 68: None, 69: None, **APIS_FROM_4_2,
}
PROFILE_MAXIMA["3.6"] = {
    0: 9, 1: 15, 2: 8, 3: 12, 9: 8, 10: 4, 16: 4, 18: 3, 22: 4, 24: 4, 25: 3, 26: 3, 28: 3, 60: 0, 66: 0,
    68: None, 69: None,  # KIP-848 was early access in 3.7-3.9 and off by default
    **APIS_FROM_4_2,
}
PROFILE_MAXIMA["3.9"] = {0: 11, 2: 9, 26: 4, 60: 1, 66: 1, 68: None, 69: None, **APIS_FROM_4_2}
PROFILE_MAXIMA["4.2"] = {}  # share and streams groups production-ready (share.version, streams.version 1)
PROFILE_MAXIMA["4.4"] = {}  # everything implemented is within what 4.4 advertises
_OLD_MINIMA = {0: 3, 2: 1, 8: 2}  # versions Kafka 4 removed (KIP-896) stay refused here
PROFILE_MINIMA: dict[str, dict[int, int]] = {"4.0": {}, "4.2": {}, "4.4": {}, "2.4": _OLD_MINIMA, "2.8": _OLD_MINIMA,
                                             "3.6": _OLD_MINIMA, "3.9": _OLD_MINIMA}
# transaction.version (KIP-890) a profile supports and finalizes, or None before 4.0. Kafka
# 4.x finalizes 2 on a new cluster: clients end transactions with EndTxn v5 (epoch bump),
# add partitions with Produce v12 and TxnOffsetCommit v5.
TRANSACTION_VERSION: dict[str, int | None] = {"2.4": None, "2.8": None, "3.6": None, "3.9": None,
                                              "4.0": 2, "4.2": 2, "4.4": 2}
# share.version (KIP-932) and streams.version (KIP-1071) a profile finalizes: 1 from Kafka
# 4.2 (its metadata version 4.2-IV1 bootstraps both), where share and streams groups are on.
SHARE_VERSION: dict[str, int] = {"4.2": 1, "4.4": 1}
STREAMS_VERSION: dict[str, int] = {"4.2": 1, "4.4": 1}


class ApiTable:
    """The ranges in force for one version profile, restricted to implemented APIs."""

    def __init__(self, implemented: set[int], profile: str = "4.0", transaction_version: int | None = None) -> None:
        """``transaction_version``: the finalized level of the transaction.version feature, as
        an operator sets it (kafka-features.sh upgrade/downgrade); None: the profile's."""
        if profile not in PROFILE_MAXIMA:
            raise ValueError(f"unknown emulate.kafka.version {profile!r}; known: {sorted(PROFILE_MAXIMA)}")
        self.profile = profile
        supported = TRANSACTION_VERSION.get(profile)
        if transaction_version is not None and (supported is None or not 0 <= transaction_version <= supported):
            raise ValueError(f"emulate.transaction.version {transaction_version}: profile {profile} supports "
                             + ("no transaction.version feature" if supported is None else f"0 to {supported}"))
        self.transaction_version = supported if transaction_version is None else transaction_version
        maxima = PROFILE_MAXIMA[profile]
        self.ranges: dict[int, ApiRange] = {}
        for key, (name, adv_min, acc_min, max_v) in KAFKA_4_0.items():
            if key not in implemented:
                continue
            if key in maxima:
                if maxima[key] is None:
                    continue
                max_v = maxima[key]
            acc_min = max(acc_min, PROFILE_MINIMA[profile].get(key, acc_min))
            adv_min = min(adv_min, acc_min)
            if max_v < acc_min:
                continue
            self.ranges[key] = ApiRange(key, name, adv_min, acc_min, max_v)

    def get(self, api_key: int) -> ApiRange | None:
        return self.ranges.get(api_key)

    def accepts(self, api_key: int, version: int) -> bool:
        r = self.ranges.get(api_key)
        return r is not None and r.accepts(version)

    @property
    def supported_features(self) -> dict[str, int]:
        """Feature levels the broker supports (name -> highest level)."""
        level = TRANSACTION_VERSION.get(self.profile)
        out = {} if level is None else {"transaction.version": level}
        if self.profile in SHARE_VERSION:
            out["share.version"] = SHARE_VERSION[self.profile]
        if self.profile in STREAMS_VERSION:
            out["streams.version"] = STREAMS_VERSION[self.profile]
        return out

    @property
    def features(self) -> dict[str, int]:
        """Finalized feature levels ApiVersions v3+ reports (name -> level); level 0 is not
        listed, as Kafka leaves out a feature finalized at 0."""
        level = self.transaction_version
        out = {} if not level else {"transaction.version": level}
        if self.profile in SHARE_VERSION:
            out["share.version"] = SHARE_VERSION[self.profile]
        if self.profile in STREAMS_VERSION:
            out["streams.version"] = STREAMS_VERSION[self.profile]
        return out


def api_name(api_key: int) -> str:
    entry = KAFKA_4_0.get(api_key)
    return entry[0] if entry else api_key_map.get(api_key, f"api-{api_key}")
