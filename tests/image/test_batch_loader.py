"""MetadataBatchLoader: batches into deltas, and KIP-866 metadata transactions.

Re-states Kafka's ``MetadataBatchLoaderTest`` (metadata/src/test/java/org/apache/kafka/image/loader/)
scenario by scenario, with kraft's batches (framed record bytes; a batch's size is the Raft layer's
``size_in_bytes``, where Kafka's tests give one by hand), plus what kraft does differently on purpose:
an Abort drops the transaction's records at once, a fault stops the loader, control batches alone
are not a "seen record".
"""
from __future__ import annotations

import pytest

from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.metadata_image import MetadataImage
from kraft_node.metadata.loader import (
    LogDeltaManifest,
    MetadataBatchLoader,
    RecordingFaultHandler,
    TransactionState,
)
from kraft_node.raft.messages import Batch, LeaderAndEpoch
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

TOPIC_FOO = Uuid.from_string("c6uHMgPkRp2Urjlh-RxMNQ")
TOPIC_BAR = Uuid.from_string("tUWOOPvzQhmZZ_eXmTCcig")
LEADER_AND_EPOCH = LeaderAndEpoch(1, 42)


def rec(message: object) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(message, 0)


TOPIC_TXN_BATCH_1 = [
    rec(m.BeginTransactionRecord(name="txn-1")),
    rec(m.TopicRecord(name="foo", topic_id=TOPIC_FOO)),
    rec(m.PartitionRecord(partition_id=0, topic_id=TOPIC_FOO)),
]
TOPIC_TXN_BATCH_2 = [
    rec(m.PartitionRecord(partition_id=1, topic_id=TOPIC_FOO)),
    rec(m.PartitionRecord(partition_id=2, topic_id=TOPIC_FOO)),
    rec(m.EndTransactionRecord()),
]
TOPIC_NO_TXN_BATCH = [
    rec(m.TopicRecord(name="bar", topic_id=TOPIC_BAR)),
    rec(m.PartitionRecord(partition_id=0, topic_id=TOPIC_BAR)),
    rec(m.PartitionRecord(partition_id=1, topic_id=TOPIC_BAR)),
]
TXN_BEGIN = [rec(m.BeginTransactionRecord(name="txn-1"))]
TXN_END = [rec(m.EndTransactionRecord())]
TXN_ABORT = [rec(m.AbortTransactionRecord())]


def no_ops(n: int) -> list[ApiMessageAndVersion]:
    return [rec(m.NoOpRecord()) for _ in range(n)]


def batch(base_offset: int, epoch: int, records: list[ApiMessageAndVersion], append_time_ms: int = 0) -> Batch:
    return Batch(base_offset, epoch, tuple(r.encode() for r in records), append_time_ms=append_time_ms)


class Updater:
    """Kafka's MockMetadataUpdater: the latest publication and how many there were."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.latest_delta = None
        self.latest_image: MetadataImage | None = None
        self.latest_manifest: LogDeltaManifest | None = None
        self.updates = 0

    def __call__(self, delta, image, manifest) -> None:
        self.latest_delta, self.latest_image, self.latest_manifest = delta, image, manifest
        self.updates += 1


class Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        self.ns += 1000  # every reading advances 1 us
        return self.ns


def make_loader(name: str = "test") -> tuple[MetadataBatchLoader, Updater, RecordingFaultHandler]:
    updater = Updater()
    faults = RecordingFaultHandler(name)
    loader = MetadataBatchLoader(clock_ns=Clock(), fault_handler=faults, callback=updater)
    loader.reset_to_image(MetadataImage.EMPTY)
    return loader, updater, faults


def topic(image: MetadataImage | None, name: str):
    assert image is not None
    return image.topics.get_topic_by_name(name)


def load_single_batch(records: list[ApiMessageAndVersion], name: str = "test"):
    loader, updater, faults = make_loader(name)
    b = batch(10, 42, records)
    loader.load_batch(b, LEADER_AND_EPOCH)
    return loader, updater, faults, b


# ---------------------------------------------------------------- Kafka's scenarios

def test_aligned_transaction_batches():
    loader, updater, faults = make_loader()
    batches = [batch(10, 1, TOPIC_TXN_BATCH_1), batch(13, 2, no_ops(3)), batch(16, 2, TOPIC_TXN_BATCH_2)]
    for b in batches:
        loader.load_batch(b, LEADER_AND_EPOCH)
        assert updater.updates == 0
    assert loader.transaction_state is TransactionState.ENDED_TRANSACTION
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 1
    assert topic(updater.latest_image, "foo") is not None
    prov = updater.latest_image.provenance
    assert (prov.last_contained_offset, prov.last_contained_epoch, prov.is_offset_batch_aligned) == (18, 2, True)
    manifest = updater.latest_manifest
    assert manifest.num_batches == 3 and manifest.num_records == 9
    assert manifest.num_bytes == sum(b.size_in_bytes for b in batches)
    assert manifest.leader_and_epoch == LEADER_AND_EPOCH
    assert faults.first is None


def test_singleton_begin_and_end():
    batch1 = batch(13, 1, no_ops(3), append_time_ms=100)
    batch2 = batch(16, 2, TXN_BEGIN)
    batch3 = batch(17, 3, TOPIC_NO_TXN_BATCH)
    batch4 = batch(20, 4, TXN_END)
    loader, updater, faults = make_loader()

    # all in one commit
    loader.load_batch(batch1, LEADER_AND_EPOCH)
    assert updater.updates == 0
    loader.load_batch(batch2, LEADER_AND_EPOCH)  # the Begin first publishes batch1
    assert updater.updates == 1
    prov = updater.latest_image.provenance
    assert prov.is_offset_batch_aligned and prov.last_contained_offset == 15
    # kraft: the epoch and time of the batch that offset 15 is in (Kafka takes the Begin's batch's)
    assert (prov.last_contained_epoch, prov.last_contained_log_time_ms) == (1, 100)
    assert updater.latest_manifest.num_batches == 1 and updater.latest_manifest.num_records == 3
    assert topic(updater.latest_image, "bar") is None
    loader.load_batch(batch3, LEADER_AND_EPOCH)
    assert updater.updates == 1
    loader.load_batch(batch4, LEADER_AND_EPOCH)
    assert updater.updates == 1
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert topic(updater.latest_image, "bar") is not None
    prov = updater.latest_image.provenance
    assert (prov.last_contained_offset, prov.last_contained_epoch) == (20, 4)
    assert updater.latest_manifest.num_batches == 3 and updater.latest_manifest.num_records == 5

    # each batch in a commit of its own
    updater.reset()
    loader.reset_to_image(MetadataImage.EMPTY)
    loader.load_batch(batch1, LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 1
    loader.load_batch(batch2, LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 1
    loader.load_batch(batch3, LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 1
    loader.load_batch(batch4, LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 2
    assert topic(updater.latest_image, "bar") is not None
    assert faults.first is None


def test_unexpected_begin_transaction():
    loader, updater, faults = make_loader("testUnexpectedBeginTransaction")
    loader.load_batch(batch(10, 2, TOPIC_TXN_BATCH_1), LEADER_AND_EPOCH)
    assert faults.first is None
    loader.load_batch(batch(13, 2, TXN_BEGIN), LEADER_AND_EPOCH)
    assert type(faults.first.cause) is RuntimeError
    assert str(faults.first.cause) == "Encountered BeginTransactionRecord while already in a transaction"
    assert str(faults.first) == ("testUnexpectedBeginTransaction: Error loading metadata log record from offset 13: "
                                 "Encountered BeginTransactionRecord while already in a transaction")
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 0
    assert loader.failure == (13, "Error loading metadata log record from offset 13")


@pytest.mark.parametrize("marker,text", [
    (TXN_END, "Encountered EndTransactionRecord without having seen a BeginTransactionRecord"),
    (TXN_ABORT, "Encountered AbortTransactionRecord without having seen a BeginTransactionRecord"),
], ids=["end", "abort"])
def test_unexpected_end_or_abort_transaction(marker, text):
    """Kafka's testUnexpectedEndTransaction / testUnexpectedAbortTransaction: the fault names the record.
    kraft stops there: the prior batch, published by its own commit, stays; the failed commit's
    delta is dropped and nothing more is published."""
    loader, updater, faults = make_loader()
    loader.load_batch(batch(10, 2, TOPIC_NO_TXN_BATCH), LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert faults.first is None and updater.updates == 1
    loader.load_batch(batch(13, 2, no_ops(1) + marker), LEADER_AND_EPOCH)
    assert type(faults.first.cause) is RuntimeError and str(faults.first.cause) == text
    assert loader.failure == (14, "Error loading metadata log record from offset 14")
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 1
    assert topic(updater.latest_image, "bar") is not None
    assert updater.latest_image.provenance.last_contained_offset == 12
    # stopped: later batches are not loaded
    loader.load_batch(batch(15, 2, TOPIC_TXN_BATCH_1[1:]), LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 1 and len(faults.faults) == 1


def test_unexpected_end_in_the_same_commit_drops_the_commit():
    """The other half of Kafka's testUnexpectedEndTransaction: batch 1 and the bad batch 2 in one
    commit.  Kafka publishes batch 1 and skips the bad record; kraft publishes neither (the record
    before the fault may have half-changed the delta) and stops at the last published image."""
    loader, updater, faults = make_loader()
    loader.load_batch(batch(10, 2, TOPIC_NO_TXN_BATCH), LEADER_AND_EPOCH)
    loader.load_batch(batch(13, 2, TXN_END), LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 0
    assert faults.first is not None and loader.failure[0] == 13
    assert loader.image is MetadataImage.EMPTY


def test_multiple_transactions_in_one_batch():
    records = TOPIC_TXN_BATCH_1 + TOPIC_TXN_BATCH_2 + TXN_BEGIN + TOPIC_NO_TXN_BATCH + TXN_END
    loader, updater, faults, b = load_single_batch(records)
    assert updater.updates == 1
    assert updater.latest_manifest.num_bytes == 0 and updater.latest_manifest.num_batches == 0
    assert updater.latest_manifest.num_records == 6
    prov = updater.latest_image.provenance
    assert prov.last_contained_offset == 15
    assert not prov.is_offset_batch_aligned  # the first transaction was published mid-batch
    assert prov.last_contained_epoch == 42
    assert topic(updater.latest_image, "foo") is not None and topic(updater.latest_image, "bar") is None

    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 2
    assert updater.latest_manifest.num_bytes == b.size_in_bytes
    assert updater.latest_manifest.num_batches == 1 and updater.latest_manifest.num_records == 5
    prov = updater.latest_image.provenance
    assert (prov.last_contained_offset, prov.last_contained_epoch, prov.is_offset_batch_aligned) == (20, 42, True)
    assert topic(updater.latest_image, "foo") is not None and topic(updater.latest_image, "bar") is not None
    assert faults.first is None


def test_multiple_transactions_in_one_batch_with_no_ops():
    records = (no_ops(1) + TOPIC_TXN_BATCH_1 + no_ops(1) + TOPIC_TXN_BATCH_2
               # non-transactional records between two transactions: a delta is published at the Begin
               + no_ops(1) + TXN_BEGIN + no_ops(1) + TOPIC_NO_TXN_BATCH + no_ops(1) + TXN_END + no_ops(1))
    loader, updater, faults, b = load_single_batch(records)
    assert updater.updates == 2
    assert updater.latest_manifest.num_bytes == 0
    prov = updater.latest_image.provenance
    assert (prov.last_contained_offset, prov.last_contained_epoch, prov.is_offset_batch_aligned) == (18, 42, False)
    assert topic(updater.latest_image, "foo") is not None and topic(updater.latest_image, "bar") is None

    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 3
    assert updater.latest_manifest.num_bytes == b.size_in_bytes
    prov = updater.latest_image.provenance
    assert (prov.last_contained_offset, prov.last_contained_epoch) == (26, 42)
    assert topic(updater.latest_image, "foo") is not None and topic(updater.latest_image, "bar") is not None
    assert faults.first is None


@pytest.mark.parametrize("abort", [True, False], ids=["abort", "end"])
def test_one_transaction_in_multiple_batches(abort):
    loader, updater, faults = make_loader()
    batches = [batch(16, 2, TXN_BEGIN), batch(17, 3, TOPIC_NO_TXN_BATCH), batch(20, 4, TXN_ABORT if abort else TXN_END)]
    for b in batches:
        loader.load_batch(b, LEADER_AND_EPOCH)
        assert updater.updates == 0
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    # end or abort: a new provenance and manifest are published either way
    assert updater.updates == 1
    assert updater.latest_manifest.num_bytes == sum(b.size_in_bytes for b in batches)
    assert updater.latest_manifest.num_batches == 3
    prov = updater.latest_image.provenance
    assert (prov.last_contained_offset, prov.last_contained_epoch) == (20, 4)
    assert (topic(updater.latest_image, "bar") is None) == abort
    assert faults.first is None


def test_transaction_alignment_on_batch_boundary():
    records = no_ops(3) + TOPIC_TXN_BATCH_1 + TOPIC_TXN_BATCH_2 + no_ops(3)
    loader, updater, faults, b = load_single_batch(records)
    assert updater.updates == 1
    assert updater.latest_manifest.num_bytes == 0
    assert updater.latest_image.provenance.last_contained_offset == 12
    assert not updater.latest_image.provenance.is_offset_batch_aligned

    loader.load_batch(batch(22, 42, TXN_BEGIN), LEADER_AND_EPOCH)
    assert updater.updates == 2
    assert updater.latest_manifest.num_bytes == b.size_in_bytes
    assert updater.latest_image.provenance.last_contained_offset == 21
    assert updater.latest_image.provenance.is_offset_batch_aligned
    assert faults.first is None


# ---------------------------------------------------------------- kraft's rules

def test_abort_drops_the_transaction_even_when_records_follow_in_the_same_commit():
    """A new active controller writes AbortTransaction and then its own records, often in one batch.
    Kafka would publish the aborted records with the ones that follow; kraft drops them at the Abort."""
    records = TXN_BEGIN + [rec(m.TopicRecord(name="foo", topic_id=TOPIC_FOO))] + TXN_ABORT + TOPIC_NO_TXN_BATCH
    loader, updater, faults, b = load_single_batch(records)
    assert updater.updates == 0
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 1
    assert topic(updater.latest_image, "foo") is None
    assert topic(updater.latest_image, "bar") is not None
    assert updater.latest_image.provenance.last_contained_offset == b.last_offset
    assert faults.first is None


def test_abort_in_a_later_batch_keeps_the_records_before_the_transaction():
    loader, updater, faults = make_loader()
    loader.load_batch(batch(0, 1, TOPIC_NO_TXN_BATCH), LEADER_AND_EPOCH)
    loader.load_batch(batch(3, 1, TXN_BEGIN + [rec(m.TopicRecord(name="foo", topic_id=TOPIC_FOO))]),
                      LEADER_AND_EPOCH)
    assert updater.updates == 1  # the Begin published "bar" (batch aligned: it starts a batch)
    assert updater.latest_image.provenance.is_offset_batch_aligned
    loader.load_batch(batch(5, 2, TXN_ABORT + no_ops(1)), LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 2
    image = updater.latest_image
    assert topic(image, "bar") is not None and topic(image, "foo") is None
    assert image.provenance.last_contained_offset == 6
    assert faults.first is None


def test_control_batches_move_the_offset_but_are_not_seen_records():
    loader, updater, faults = make_loader()
    control = Batch(300, 100, (b"leader-change",), is_control=True, append_time_ms=4000)
    loader.load_batch(control, LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 1
    manifest = updater.latest_manifest
    assert manifest.provenance.last_contained_offset == 300
    assert manifest.provenance.last_contained_log_time_ms == 4000
    assert (manifest.num_batches, manifest.num_bytes, manifest.num_records) == (1, control.size_in_bytes, 0)
    assert updater.latest_image.is_empty()
    assert not loader.has_seen_record  # Kafka's resetToImage would say it has
    loader.load_batch(batch(301, 100, no_ops(1)), LEADER_AND_EPOCH)
    assert not loader.has_seen_record  # not applied yet
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert loader.has_seen_record


def test_records_of_an_open_or_aborted_transaction_are_not_seen_records():
    """Kafka counts a record as seen when it is replayed, so the empty image under an open (or
    aborted) transaction could be published; here only an applied record counts."""
    loader, updater, _ = make_loader()
    loader.load_batch(batch(0, 1, TXN_BEGIN + TOPIC_NO_TXN_BATCH), LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 0 and not loader.has_seen_record
    loader.load_batch(batch(4, 1, TXN_ABORT), LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 1 and updater.latest_image.is_empty()
    assert not loader.has_seen_record
    loader.load_batch(batch(5, 1, TXN_BEGIN + TOPIC_NO_TXN_BATCH + TXN_END), LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert loader.has_seen_record and topic(updater.latest_image, "bar") is not None


def test_flush_without_new_batches_publishes_nothing():
    loader, updater, _ = make_loader()
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 0
    loader.load_batch(batch(0, 1, no_ops(2)), LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 1


def test_a_record_that_does_not_decode_is_a_fault_naming_its_offset():
    loader, updater, faults = make_loader("bad")
    good = rec(m.TopicRecord(name="bar", topic_id=TOPIC_BAR)).encode()
    loader.load_batch(Batch(7, 1, (good, b"\x01\x63\x00")), LEADER_AND_EPOCH)
    assert loader.failure == (8, "Error loading metadata log record from offset 8")
    assert str(faults.first).startswith("bad: Error loading metadata log record from offset 8: ")
    assert "apiKey 99" in str(faults.first.cause)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 0


def test_a_replay_error_is_a_fault_and_stops_the_loader():
    """A PartitionRecord for a topic the image does not have cannot be replayed."""
    loader, updater, faults = make_loader()
    loader.load_batch(batch(0, 1, [rec(m.PartitionRecord(partition_id=0, topic_id=TOPIC_FOO))]), LEADER_AND_EPOCH)
    assert loader.failure is not None and loader.failure[0] == 0
    assert faults.first.cause is not None
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert updater.updates == 0


def test_elapsed_time_and_record_counts():
    loader, updater, _ = make_loader()
    e1 = loader.load_batch(batch(0, 1, no_ops(2)), LEADER_AND_EPOCH)
    e2 = loader.load_batch(batch(2, 1, no_ops(5)), LEADER_AND_EPOCH)
    assert e1 > 0 and e2 > 0
    loader.maybe_flush_batches(LEADER_AND_EPOCH, False)
    assert updater.latest_manifest.elapsed_ns == e1 + e2
    assert updater.latest_manifest.num_records == 7
    assert not updater.latest_image.provenance.is_offset_batch_aligned


def test_reset_drops_an_open_transaction():
    loader, updater, _ = make_loader()
    loader.load_batch(batch(0, 1, TOPIC_TXN_BATCH_1), LEADER_AND_EPOCH)
    assert loader.transaction_state is TransactionState.CONTINUED_TRANSACTION
    loader.reset_to_image(MetadataImage.EMPTY, seen_record=True)
    assert loader.transaction_state is TransactionState.NO_TRANSACTION
    loader.load_batch(batch(3, 1, TOPIC_NO_TXN_BATCH), LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH, True)
    assert topic(updater.latest_image, "foo") is None and topic(updater.latest_image, "bar") is not None
