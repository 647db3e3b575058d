"""The torture checker's look at the logs on disk: producer identities and transaction
outcomes. A consistent cluster history passes; each anomaly a deposed or delayed
coordinator makes is found (and only as its class)."""

from __future__ import annotations

from torture.checker import ANOMALY_CLASSES, LoggedBatch, LogScan, ReadBack, TxnLogRecord, check

TX = "tx"
TID = "torture-t0"
PID = 7


def data(partition, offset, epoch, writer=("t0", 1), pid=PID):
    return LoggedBatch(TX, partition, offset, pid, epoch, writers=(writer,))


def marker(partition, offset, epoch, kind, pid=PID):
    return LoggedBatch(TX, partition, offset, pid, epoch, marker=kind, coordinator_epoch=1)


def state(offset, state, epoch, partitions=(), pid=PID, tid=TID):
    return TxnLogRecord(0, offset, tid, pid, epoch, state, tuple((TX, p) for p in partitions))


class History:
    """Transactions v1, producer id 7: instance 1 at epoch 0 commits a transaction on
    tx-0 and tx-1 (its COMMIT on tx-1 written twice: a marker retry), aborts one on
    tx-0; instance 2 is given epoch 1 and commits one on tx-0."""

    def __init__(self):
        self.batches = [
            data(0, 0, 0), marker(0, 1, 0, "COMMIT"), data(0, 2, 0), marker(0, 3, 0, "ABORT"),
            data(0, 4, 1, ("t0", 2)), marker(0, 5, 1, "COMMIT"),
            data(1, 0, 0), marker(1, 1, 0, "COMMIT"), marker(1, 2, 0, "COMMIT"),
        ]
        self.txn_log = [
            state(0, "Empty", 0), state(1, "Ongoing", 0, [0]), state(2, "Ongoing", 0, [0, 1]),
            state(3, "PrepareCommit", 0, [0, 1]), state(4, "CompleteCommit", 0),
            state(5, "Ongoing", 0, [0]), state(6, "PrepareAbort", 0, [0]), state(7, "CompleteAbort", 0),
            state(8, "Empty", 1), state(9, "Ongoing", 1, [0]), state(10, "PrepareCommit", 1, [0]),
            state(11, "CompleteCommit", 1),
        ]
        self.before = {TID: ("CompleteCommit", PID, 1)}
        self.after = dict(self.before)
        self.answers = []

    def check(self):
        read = ReadBack(committed=[], uncommitted=[], ends={}, logs=[LogScan(self.batches, self.txn_log)],
                        coordinators_before=self.before, coordinators_after=self.after,
                        init_answers=self.answers)
        return check([], read)


def only(report, cls, count=1):
    assert report.anomalies[cls] == count, report.details
    assert all(report.anomalies[c] == 0 for c in ANOMALY_CLASSES if c != cls), report.details
    assert not report.ok


def test_a_consistent_history_passes():
    report = History().check()
    assert report.ok, report.details


def test_two_instances_writing_with_one_producer_epoch():
    h = History()
    h.batches.append(data(1, 3, 1, ("t0", 1)))  # the old instance at the new instance's epoch
    report = h.check()
    only(report, "shared_producer_epoch")
    assert "producer id 7 epoch 1 written by 2 producers" in report.details[0]


def test_an_epoch_handed_out_again_by_a_deposed_coordinator():
    h = History()
    h.txn_log += [state(12, "Empty", 48), state(13, "Empty", 47)]  # node 1 reached 48; node 2 gives 47
    only(h.check(), "shared_producer_epoch")


def test_init_producer_id_answers_each_logged_and_given_once():
    h = History()
    h.answers = [(TID, PID, 0), (TID, PID, 1)]
    assert h.check().ok


def test_one_epoch_given_to_two_init_producer_id_callers():
    h = History()
    h.answers = [(TID, PID, 1), (TID, PID, 1)]  # the stopped node and the new coordinator
    only(h.check(), "shared_producer_epoch")


def test_an_epoch_given_that_the_transaction_log_does_not_hold():
    h = History()
    h.answers = [(TID, PID, 2)]  # answered by a coordinator whose write did not stand
    only(h.check(), "shared_producer_epoch")


def test_a_transaction_decided_both_ways():
    h = History()
    # the stopped coordinator commits; the new one times the same transaction out and aborts it
    h.txn_log += [state(12, "Ongoing", 1, [0]), state(13, "PrepareCommit", 1, [0]), state(14, "CompleteCommit", 1),
                  state(15, "PrepareAbort", 2, [0]), state(16, "CompleteAbort", 2)]
    h.batches += [data(0, 6, 1, ("t0", 2)), marker(0, 7, 1, "COMMIT"), marker(0, 8, 2, "ABORT")]
    h.before = h.after = {TID: ("CompleteAbort", PID, 2)}
    report = h.check()
    only(report, "outcome_mismatch")
    assert "decided COMMIT" in report.details[0] and "ABORT at" in report.details[0]


def test_a_late_marker_ends_the_next_transaction():
    h = History()
    # transactions v1: the first transaction's COMMIT on tx-0 arrives again, after the next one's data
    h.batches.insert(3, marker(0, 3, 0, "COMMIT"))
    h.batches[4:6] = [marker(0, 4, 0, "ABORT"), data(0, 5, 1, ("t0", 2))]
    h.batches[6] = marker(0, 6, 1, "COMMIT")
    report = h.check()
    only(report, "outcome_mismatch")
    assert "tx-0@3: COMMIT marker of producer 7 epoch 0" in report.details[0]


def test_a_marker_that_contradicts_the_decision():
    h = History()
    h.batches[3] = marker(0, 3, 0, "COMMIT")  # the log decided ABORT
    report = h.check()
    only(report, "outcome_mismatch", 1)


def test_a_completed_transaction_without_its_marker():
    h = History()
    del h.batches[5]  # instance 2's COMMIT on tx-0
    report = h.check()
    only(report, "outcome_mismatch")
    assert "no COMMIT marker of producer 7 epoch 1" in report.details[0]


def test_a_decision_not_yet_completed_needs_no_marker():
    h = History()
    h.txn_log += [state(12, "Ongoing", 1, [1]), state(13, "PrepareAbort", 1, [1])]
    h.before = h.after = {TID: ("PrepareAbort", PID, 1)}
    assert h.check().ok


def test_a_state_that_flips_on_restart():
    h = History()
    h.before = {TID: ("Ongoing", PID, 1)}
    h.after = {TID: ("CompleteCommit", PID, 1)}
    report = h.check()
    only(report, "outcome_mismatch")
    assert "before the restart" in report.details[0]


def test_a_compacted_transaction_log_is_not_held_against_the_markers():
    h = History()
    del h.txn_log[:8]  # cleaned away
    report = h.check()
    assert not report.ok  # without knowing: the first markers have no decision
    compacted = History()
    del compacted.txn_log[:8]
    compacted_read = LogScan(compacted.batches, compacted.txn_log, compacted={0})
    assert check([], ReadBack(committed=[], uncommitted=[], ends={}, logs=[compacted_read])).ok


def test_an_anomaly_in_both_scans_counts_once():
    h = History()
    h.batches[3] = marker(0, 3, 0, "COMMIT")
    scan = LogScan(h.batches, h.txn_log)
    report = check([], ReadBack(committed=[], uncommitted=[], ends={}, logs=[scan, scan]))
    only(report, "outcome_mismatch", 1)


def test_decisions_on_partitions_not_read_are_not_expected_there():
    h = History()
    h.txn_log[3] = TxnLogRecord(0, 3, TID, PID, 0, "PrepareCommit", ((TX, 0), (TX, 1), ("__consumer_offsets", 4)))
    scan = LogScan(h.batches, h.txn_log, topics=frozenset({TX}))
    assert check([], ReadBack(committed=[], uncommitted=[], ends={}, logs=[scan])).ok
    everything = LogScan(h.batches, h.txn_log)
    only(check([], ReadBack(committed=[], uncommitted=[], ends={}, logs=[everything])), "outcome_mismatch")


def test_an_anomaly_only_after_the_restart_says_so():
    h = History()
    before = LogScan(list(h.batches), list(h.txn_log))
    del h.batches[5]  # the restart lost instance 2's COMMIT on tx-0
    after = LogScan(h.batches, h.txn_log)
    report = check([], ReadBack(committed=[], uncommitted=[], ends={}, logs=[before, after]))
    only(report, "outcome_mismatch")
    assert report.details[0].endswith("(in the logs after the restart)")


def test_transactions_that_wrote_nothing_and_markers_written_again():
    h = History()
    # instance 2: an abort that wrote nothing on tx-0, then a commit, whose marker's answer
    # was lost twice (written three times), then a commit that wrote data
    h.batches[4:6] = [marker(0, 4, 1, "ABORT"), data(0, 5, 1, ("t0", 2)), marker(0, 6, 1, "COMMIT"),
                      marker(0, 7, 1, "COMMIT"), marker(0, 8, 1, "COMMIT"), data(0, 9, 1, ("t0", 2)),
                      marker(0, 10, 1, "COMMIT")]
    h.txn_log[8:] = [state(8, "Empty", 1), state(9, "Ongoing", 1, [0]), state(10, "PrepareAbort", 1, [0]),
                     state(11, "CompleteAbort", 1), state(12, "Ongoing", 1, [0]), state(13, "PrepareCommit", 1, [0]),
                     state(14, "CompleteCommit", 1), state(15, "Ongoing", 1, [0]),
                     state(16, "PrepareCommit", 1, [0]), state(17, "CompleteCommit", 1)]
    assert h.check().ok, h.check().details
    h.batches[10] = marker(0, 10, 1, "ABORT")  # the last one ended the other way
    only(h.check(), "outcome_mismatch")


def test_a_transaction_that_wrote_nothing_between_two_of_the_same_kind():
    h = History()
    # instance 2 commits three transactions on tx-0; the second wrote nothing there, so its
    # COMMIT follows the first one's with no data between, as a retry would
    h.batches[4:6] = [data(0, 4, 1, ("t0", 2)), marker(0, 5, 1, "COMMIT"), marker(0, 6, 1, "COMMIT"),
                      data(0, 7, 1, ("t0", 2)), marker(0, 8, 1, "COMMIT")]
    h.txn_log[8:] = [state(8, "Empty", 1)] + [
        rec for n in range(3) for rec in (state(9 + 3 * n, "Ongoing", 1, [0]),
                                          state(10 + 3 * n, "PrepareCommit", 1, [0]),
                                          state(11 + 3 * n, "CompleteCommit", 1))]
    assert h.check().ok, h.check().details
    del h.batches[8]  # the last COMMIT missing
    only(h.check(), "outcome_mismatch")
