"""The torture checker on synthetic histories: a clean history passes, and each anomaly
class is detected (and only that class)."""

from __future__ import annotations

from torture.checker import ANOMALY_CLASSES, Observed, ReadBack, check

SRC, OUT, TX = "src", "out", "tx"


def txn(p, x, n, outcome):
    return {"kind": "txn", "p": p, "x": x, "n": n, "outcome": outcome}


def idem(p, s, outcome="acked", partition=0, offset=0):
    return {"kind": "idem", "p": p, "s": s, "outcome": outcome, "partition": partition, "offset": offset}


def rec(topic, partition, offset, **value):
    return Observed(topic, partition, offset, value)


class Scenario:
    """A consistent history: two committed and one aborted transaction of t0, three
    acknowledged idempotent records, and a consume-transform-produce worker that copied
    the first two of them and committed offset 2."""

    def __init__(self):
        self.events = [
            txn("t0", 1, 2, "committed"), txn("t0", 2, 1, "aborted"), txn("t0", 3, 2, "committed"),
            idem("i0", 1, offset=0), idem("i0", 2, offset=1), idem("i0", 3, offset=2),
            txn("c0", 1, 2, "committed"),
        ]
        self.tx = [
            rec(TX, 0, 0, p="t0", x=1, i=0, n=2), rec(TX, 1, 0, p="t0", x=1, i=1, n=2),
            rec(TX, 0, 3, p="t0", x=3, i=0, n=2), rec(TX, 0, 4, p="t0", x=3, i=1, n=2),
        ]
        self.aborted = [rec(TX, 0, 1, p="t0", x=2, i=0, n=1)]
        self.src = [rec(SRC, 0, o, p="i0", s=o + 1) for o in range(3)]
        self.out = [rec(OUT, 0, 0, p="c0", x=1, i=0, n=2, sp=0, so=0),
                    rec(OUT, 0, 1, p="c0", x=1, i=1, n=2, sp=0, so=1)]
        self.ends = {(TX, 0): (6, 6), (TX, 1): (2, 2), (SRC, 0): (3, 3), (OUT, 0): (3, 3)}
        self.ctp_committed = {0: 2}

    def read(self) -> ReadBack:
        committed = self.tx + self.src + self.out
        return ReadBack(committed=committed, uncommitted=committed + self.aborted, ends=self.ends,
                        ctp_source_topic=SRC, ctp_committed=self.ctp_committed)

    def check(self):
        return check(self.events, self.read())


def only(report, cls, count=1):
    assert report.anomalies[cls] == count, report.details
    assert all(report.anomalies[c] == 0 for c in ANOMALY_CLASSES if c != cls), report.details
    assert not report.ok
    assert f"{cls}={count}" in report.summary()
    assert report.summary().endswith("ANOMALIES")


def test_consistent_history_has_no_anomaly():
    report = Scenario().check()
    assert report.ok, report.details
    assert report.transactions == {"committed": 3, "aborted": 1}
    assert report.summary().endswith(" OK")


def test_committed_transaction_with_no_record_visible_is_a_lost_write():
    s = Scenario()
    s.tx = [r for r in s.tx if r.value["x"] != 3]
    only(s.check(), "lost_write")


def test_acknowledged_idempotent_record_missing_is_a_lost_write():
    s = Scenario()
    s.src = [r for r in s.src if r.value["s"] != 3]
    only(s.check(), "lost_write")


def test_consumed_and_committed_source_record_without_copy_is_a_lost_write():
    s = Scenario()
    s.out = s.out[:1]
    s.events[-1] = txn("c0", 1, 1, "committed")
    s.out = [rec(OUT, 0, 0, p="c0", x=1, i=0, n=1, sp=0, so=0)]
    only(s.check(), "lost_write")


def test_record_of_aborted_transaction_visible_is_an_aborted_read():
    s = Scenario()
    s.tx.append(s.aborted[0])
    only(s.check(), "aborted_read")


def test_committed_transaction_visible_in_part_is_torn():
    s = Scenario()
    s.tx = [r for r in s.tx if not (r.value["x"] == 3 and r.value["i"] == 1)]
    only(s.check(), "torn_transaction")


def test_copy_visible_beyond_the_committed_group_offset_is_torn():
    s = Scenario()
    s.ctp_committed = {0: 1}
    only(s.check(), "torn_transaction")


def test_transactional_record_twice_is_a_duplicate():
    s = Scenario()
    s.tx.append(rec(TX, 1, 1, p="t0", x=3, i=1, n=2))
    only(s.check(), "duplicate_transactional")


def test_idempotent_record_twice_is_a_duplicate():
    s = Scenario()
    s.src.append(rec(SRC, 0, 3, p="i0", s=3))
    s.ends[(SRC, 0)] = (4, 4)
    only(s.check(), "duplicate_idempotent")


def test_source_record_copied_by_two_committed_transactions_is_a_ctp_duplicate():
    s = Scenario()
    s.events.append(txn("c0", 2, 1, "committed"))
    s.out.append(rec(OUT, 0, 2, p="c0", x=2, i=0, n=1, sp=0, so=1))
    only(s.check(), "duplicate_ctp")


def test_later_transaction_before_an_earlier_one_in_a_partition_is_an_order_violation():
    s = Scenario()
    s.tx[0], s.tx[2] = (rec(TX, 0, 3, p="t0", x=1, i=0, n=2), rec(TX, 0, 0, p="t0", x=3, i=0, n=2))
    only(s.check(), "order_violation")


def test_idempotent_sequence_out_of_order_is_an_order_violation():
    s = Scenario()
    s.src = [rec(SRC, 0, 0, p="i0", s=1), rec(SRC, 0, 1, p="i0", s=3), rec(SRC, 0, 2, p="i0", s=2)]
    # the worker copied offsets 0 and 1: the sources are still there, only their order is wrong
    only(s.check(), "order_violation")


def test_lso_below_high_watermark_at_the_end_is_stuck():
    s = Scenario()
    s.ends[(TX, 0)] = (6, 5)
    only(s.check(), "lso_stuck")


def test_unknown_outcome_visible_in_part():
    s = Scenario()
    s.events.append(txn("t0", 4, 3, "unknown"))
    s.tx.append(rec(TX, 1, 1, p="t0", x=4, i=0, n=3))
    only(s.check(), "unknown_partial")


def test_unknown_outcome_visible_whole_or_not_at_all_is_fine():
    s = Scenario()
    s.events += [txn("t0", 4, 1, "unknown"), txn("t0", 5, 2, "unknown")]
    s.tx.append(rec(TX, 1, 1, p="t0", x=4, i=0, n=1))
    report = s.check()
    assert report.ok, report.details
    assert report.transactions["unknown"] == 2


def test_transaction_never_logged_counts_as_unknown():
    s = Scenario()
    s.tx.append(rec(TX, 1, 1, p="t0", x=4, i=0, n=2))  # the client died before logging it
    only(s.check(), "unknown_partial")


def test_failed_idempotent_send_may_or_may_not_be_there():
    s = Scenario()
    s.events.append(idem("i0", 4, outcome="unknown"))
    report = s.check()
    assert report.ok, report.details
    assert report.idempotent == {"acked": 3, "unknown": 1}
