"""Committed batches into deltas, with metadata transactions (Kafka's ``MetadataBatchLoader``, KIP-866).

Why a class apart from the loader: the loader hands over whole commits (many batches), and
publishing once per commit rather than once per batch is what keeps publishers cheap; the
folding, the transaction state machine and the offset bookkeeping are the part with rules
worth testing alone.

Folding: every record of every batch is decoded and replayed into one
:class:`~kraft_node.metadata.image.metadata_image.MetadataDelta` over ``image``; at the end
of the commit the loader calls :meth:`MetadataBatchLoader.maybe_flush_batches`, which applies
the delta and hands ``(delta, image, LogDeltaManifest)`` to the callback -- unless a
transaction is open.  A control batch (LeaderChange, voters, kraft.version) has no metadata
record but moves the offset, counts as a batch and its bytes.

Runs of ISR/leader-only PartitionChangeRecords (a broker's shutdown or fencing: tens of
thousands, in batches of up to 200) are the exception to record at a time: a run of at least
:data:`CHANGE_RUN_MIN` of them is replayed into the same delta in columns
(:mod:`kraft_node.metadata.image.change_runs`), giving the delta record-at-a-time replay
would give (tested).  A run counts as one non-marker record for the transaction state machine.
:attr:`MetadataBatchLoader.fast_changes` off replays every record one at a time.

Transactions (Begin/End/AbortTransactionRecord)::

    NO ----Begin----> STARTED --record--> CONTINUED --End--> ENDED ---record--> NO
                         |                    |                 \\--Begin--> STARTED
                         +-------Abort--------+--> ABORTED --record--> NO

* a delta is never published while a transaction is open (STARTED, CONTINUED);
* a Begin that is not the first record since the last publication first publishes what came
  before it (so the image under a transaction is exactly the state before it); when the Begin
  is the first record of a batch that image is batch-aligned, otherwise it is not, and the
  snapshot generator will not write it;
* Begin inside a transaction, End or Abort outside one: a fault (Kafka's messages).

Differences from Kafka, on purpose:

* **Abort discards at once.**  Kafka discards the transaction's records only when the commit
  ends in the ABORTED state; records that follow the Abort in the same commit (a new active
  controller may write AbortTransaction and then its activation records in one batch) would
  publish the aborted records with them.  Here the Abort replaces the delta by a fresh one over ``image``
  (the state before the Begin), so only the records after the Abort remain.
* **A fault stops the loader.**  Kafka reports a record that fails to decode or replay and goes
  on with the next one (so the image silently misses it).  Here the fault handler gets Kafka's
  message (``Error loading metadata log record from offset N``) and the batch loader stops: the
  delta in progress is dropped, nothing more is applied or published, and :attr:`failure` says
  where it stopped.  The image stays the last one published (a whole, consistent state).
* **Seen records.**  ``has_seen_record`` (the loader publishes nothing before it) becomes true
  when a delta holding a metadata record is applied or a snapshot is loaded
  (:meth:`reset_to_image` with ``seen_record``).  Kafka sets it when a record is replayed --
  so a record inside a transaction still open, or aborted, lets the loader publish the empty
  image under it -- and again on every publication (its ``resetToImage``), so a log of control
  batches alone publishes an empty image too.  Here an image is published only once it holds a
  record, or is a snapshot (an empty snapshot is a whole state: its empty image is published).
* The epoch and time of a delta published just before a transaction that starts a batch are
  those of the previous batch (whose last offset the delta ends at); Kafka takes the new batch's.
* :meth:`load_batch` returns the batch's own processing time (Kafka returns the running total
  since the last publication; the manifest's ``elapsed_ns`` is that total here too).
"""
from __future__ import annotations

import bisect
import enum
import itertools
import logging
from collections.abc import Callable, Sequence

import numpy as np

from kraft_node.metadata.image.bulk import BulkLoadError, bulk_delta, framed_records
from kraft_node.metadata.image.change_runs import change_runs, replay_change_run
from kraft_node.metadata.image.log_fold import LogFoldError, fold_values
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.loader.faults import FaultHandler
from kraft_node.metadata.loader.manifest import LogDeltaManifest
from kraft_node.raft.messages import Batch, LeaderAndEpoch
from kraft_storage.messages.metadata import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    decode_metadata_record,
)

__all__ = ["MetadataBatchLoader", "TransactionState", "MetadataUpdater"]

log = logging.getLogger("kraft.metadata.loader")

#: ``callback(delta, new image, manifest)``: what the batch loader publishes through
MetadataUpdater = Callable[[MetadataDelta, MetadataImage, LogDeltaManifest], None]

_BEGIN = BeginTransactionRecord.API_KEY
_END = EndTransactionRecord.API_KEY
_ABORT = AbortTransactionRecord.API_KEY
_TRANSACTION_KEYS = frozenset((_BEGIN, _END, _ABORT))
_TRANSACTION_KEY_LIST = sorted(_TRANSACTION_KEYS)


class TransactionState(enum.Enum):
    NO_TRANSACTION = "NO_TRANSACTION"
    STARTED_TRANSACTION = "STARTED_TRANSACTION"
    CONTINUED_TRANSACTION = "CONTINUED_TRANSACTION"
    ENDED_TRANSACTION = "ENDED_TRANSACTION"
    ABORTED_TRANSACTION = "ABORTED_TRANSACTION"


_NO = TransactionState.NO_TRANSACTION

#: A batch of at least this many records, met with nothing pending, is folded by the bulk path
#: (``kraft_node.metadata.image.bulk.bulk_delta``: topics and partitions in columns) and
#: published at once.  Below it the fixed cost of the columnar decode outweighs the ~10 us a
#: record the typed decode and ``MetadataDelta.replay`` cost (BENCHMARKS.md, image rows).
BULK_MIN_RECORDS = 512
#: A run of at least this many consecutive ISR/leader-only PartitionChangeRecords in a batch is
#: replayed in columns (:mod:`kraft_node.metadata.image.change_runs`); shorter runs, and batches
#: shorter than this, go record at a time: the columnar way has a fixed cost of a few dozen numpy
#: calls a run, and is slower than record at a time for runs of ~50 (benchmarks/results/s16/loader_changes.md).
CHANGE_RUN_MIN = 64
_STARTED = TransactionState.STARTED_TRANSACTION
_CONTINUED = TransactionState.CONTINUED_TRANSACTION
_ENDED = TransactionState.ENDED_TRANSACTION
_ABORTED = TransactionState.ABORTED_TRANSACTION
_OPEN = (_STARTED, _CONTINUED)


class MetadataBatchLoader:
    """Folds batches into one delta over :attr:`image` and publishes it through ``callback``.

    ``clock_ns``: monotonic nanoseconds (the manifests' ``elapsed_ns``).  Single-threaded: the
    loader's thread owns it.
    """

    #: runs of ISR/leader-only changes take the columnar replay (False: every record one at a
    #: time, the definition the tests compare it with)
    fast_changes = True

    def __init__(self, *, clock_ns: Callable[[], int], fault_handler: FaultHandler,
                 callback: MetadataUpdater) -> None:
        self._clock_ns = clock_ns
        self._fault_handler = fault_handler
        self._callback = callback
        self._has_seen_record = False
        #: (offset, message) where loading stopped, or None while it runs
        self.failure: tuple[int, str] | None = None
        self.reset_to_image(MetadataImage.EMPTY)

    # -- state ---------------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        """The image the delta in progress applies to (the last one published)."""
        return self._image

    @property
    def has_seen_record(self) -> bool:
        """A delta holding a metadata record was applied, or a snapshot loaded, since this loader was made."""
        return self._has_seen_record

    @property
    def transaction_state(self) -> TransactionState:
        return self._txn

    def reset_to_image(self, image: MetadataImage, *, seen_record: bool = False) -> None:
        """Start over from ``image``: whatever was folded and not published is dropped (an open
        transaction included).  The loader calls it with ``seen_record`` after a snapshot load."""
        self._image = image
        self._delta = MetadataDelta(image)
        self._txn = _NO
        provenance = image.provenance
        self._last_offset = provenance.last_contained_offset
        self._last_epoch = provenance.last_contained_epoch
        self._last_time_ms = provenance.last_contained_log_time_ms
        self._num_bytes = 0
        self._num_batches = 0
        self._num_records = 0
        self._elapsed_ns = 0
        #: a metadata record was replayed into ``_delta``
        self._delta_has_records = False
        if seen_record:
            self._has_seen_record = True

    # -- loading -------------------------------------------------------------------------------

    def load_batch(self, batch: Batch, leader_and_epoch: LeaderAndEpoch) -> int:
        """Fold one committed batch; returns the nanoseconds it took.  Does nothing once stopped."""
        if self.failure is not None:
            return 0
        start = self._clock_ns()
        #: records of this batch before ``counted`` were published with an earlier delta
        counted = 0
        records = () if batch.is_control else batch.records
        runs = change_runs(records, CHANGE_RUN_MIN) if self.fast_changes and len(records) >= CHANGE_RUN_MIN else None
        # a big batch goes the bulk way unless it is mostly ISR/leader-only changes: bulk_delta
        # folds topics and partitions in columns but merges changes one by one
        if len(records) >= BULK_MIN_RECORDS and self._txn is _NO and not self._delta_has_records and (
                runs is None or 2 * sum(b - a for a, b, _lo, _hi in runs[1]) < len(records)):
            elapsed = self._load_batch_bulk(batch, start, leader_and_epoch)
            if elapsed is not None:
                return elapsed
        if runs is None:
            counted = self._load_records(batch, records, 0, len(records), counted, leader_and_epoch)
        else:
            cols, spans = runs
            at = 0
            for a, b, lo, hi in spans:
                counted = self._load_records(batch, records, at, a, counted, leader_and_epoch)
                if counted < 0:
                    break
                at = a
                if replay_change_run(self._delta.get_or_create_topics_delta(), cols, lo, hi):
                    # non-marker records: STARTED -> CONTINUED, ENDED/ABORTED -> NO (as one record does)
                    txn = self._txn
                    if txn is not _NO and txn is not _CONTINUED:
                        self._txn = _CONTINUED if txn is _STARTED else _NO
                    self._delta_has_records = True
                    at = b
            else:
                counted = self._load_records(batch, records, at, len(records), counted, leader_and_epoch)
        if counted < 0:
            return self._clock_ns() - start
        elapsed = self._clock_ns() - start
        self._count_batch(batch, len(records) - counted, elapsed)
        return elapsed

    def _load_records(self, batch: Batch, records: Sequence[bytes], first: int, end: int, counted: int,
                      leader_and_epoch: LeaderAndEpoch) -> int:
        """Records ``first .. end - 1`` of ``batch`` one at a time; returns the new ``counted``
        (records of the batch published with an earlier delta), -1 once loading stopped."""
        base = batch.base_offset
        replay = self._delta.replay
        for index in range(first, end):
            value = records[index]
            try:
                api_key, _version, message = decode_metadata_record(value, base + index)
                if api_key in _TRANSACTION_KEYS:
                    self._transaction_marker(api_key)
                    replay = self._delta.replay  # an Abort starts a new delta
                else:
                    txn = self._txn
                    if txn is not _NO and txn is not _CONTINUED:
                        # STARTED -> CONTINUED; ENDED/ABORTED -> NO
                        self._txn = _CONTINUED if txn is _STARTED else _NO
                    self._delta_has_records = True
                    replay(message)
            except Exception as exc:
                self.fail(base + index, f"Error loading metadata log record from offset {base + index}", exc)
                return -1
            if self._txn is _STARTED and (index > 0 or self._num_batches > 0):
                self._publish_before_transaction(batch, index, index - counted, leader_and_epoch)
                if self.failure is not None:
                    return -1
                counted = index
                self._txn = _STARTED
                replay = self._delta.replay
        return counted

    def _count_batch(self, batch: Batch, new_records: int, elapsed: int) -> None:
        """The batch is folded: the pending delta now ends with it (what its manifest will say)."""
        self._num_records += new_records
        self._last_offset = batch.last_offset
        self._last_epoch = batch.epoch
        self._last_time_ms = batch.append_time_ms
        self._num_bytes += batch.size_in_bytes
        self._num_batches += 1
        self._elapsed_ns += elapsed

    def _load_batch_bulk(self, batch: Batch, start: int, leader_and_epoch: LeaderAndEpoch) -> int | None:
        """A big batch with nothing pending: fold it by the bulk path and publish it at once (a
        folded delta takes no more records: its topics are an image).  None, and nothing done,
        when the batch holds transaction records (those go record at a time).

        Why publish here: the delta of the batch is complete, and an image at a batch boundary is
        a consistent one (Kafka's batch loader also publishes inside a commit, at transaction
        ends).  A controller's topic creation commits batches of up to 10,000 records; record at a
        time the loader would spend about as much CPU on them as the controller itself."""
        fr = framed_records(batch.records)
        if np.isin(fr.api_key, _TRANSACTION_KEY_LIST).any():
            return None
        try:
            delta = bulk_delta(fr, self._image)
        except BulkLoadError as exc:
            offset = batch.base_offset + (exc.index if exc.index is not None else 0)
            self.fail(offset, f"Error loading metadata log record from offset {offset}", exc.cause)
            return self._clock_ns() - start
        elapsed = self._clock_ns() - start
        self._delta = delta
        self._delta_has_records = True
        self._count_batch(batch, len(batch.records), elapsed)
        provenance = MetadataProvenance(self._last_offset, self._last_epoch, self._last_time_ms, True)
        manifest = LogDeltaManifest(provenance, leader_and_epoch, self._num_batches, self._elapsed_ns,
                                    self._num_bytes, self._num_records)
        self._apply_and_publish(delta, manifest)
        return elapsed

    @staticmethod
    def after_last_transaction_marker(batches: Sequence[Batch]) -> int:
        """The index just after the last batch of ``batches`` that holds a transaction marker, 0
        when none does: where a catching-up run may start (see :meth:`load_run_bulk`)."""
        values: list[bytes] = []
        ends: list[int] = []
        for b in batches:
            if not b.is_control:
                values.extend(b.records)
            ends.append(len(values))
        if not values:
            return 0
        marked = np.flatnonzero(np.isin(framed_records(values).api_key, _TRANSACTION_KEY_LIST))
        if not len(marked):
            return 0
        return bisect.bisect_right(ends, int(marked[-1])) + 1

    def load_run_bulk(self, batches: Sequence[Batch], leader_and_epoch: LeaderAndEpoch) -> int | None:
        """Fold a run of committed batches at once (the log fold, :mod:`~kraft_node.metadata.image.log_fold`:
        partitions and their changes in C, configs and brokers in numpy) and publish the image at its
        end; the nanoseconds it took, or None (nothing done) when the run does not qualify: a
        transaction open or a delta pending, fewer than :data:`BULK_MIN_RECORDS` records in all, or
        a transaction marker among them (those go batch by batch, record at a time).

        Why: a node catching up (a restarted broker reading its log tail, an observer fetching a
        long log) gets many batches per commit, most of them small -- a topic creation of 100
        partitions is one batch of ~101 records, a broker's controlled shutdown batches of ~200
        PartitionChangeRecords -- and record at a time they cost ~15 us a record (BENCHMARKS.md,
        the loader row); :func:`bulk_delta` folds topic and partition records in columns but
        replays changes one by one (~60-90 us each).  The log fold takes both in bulk.

        Only while catching up, before any publisher was initialized (the loader's guard): the
        callback then gets an empty delta over the new image, not the change from the old one --
        nobody reads it (the publishers installed meanwhile start from the whole image), and
        computing that delta is what this path avoids."""
        if self.failure is not None or self._txn is not _NO or self._delta_has_records:
            return None
        values: list[bytes] = []
        offsets: list[range] = []
        for b in batches:
            if not b.is_control:
                values.extend(b.records)
                offsets.append(range(b.base_offset, b.base_offset + len(b.records)))
        if len(values) < BULK_MIN_RECORDS:
            return None
        start = self._clock_ns()
        fr = framed_records(values)
        if np.isin(fr.api_key, _TRANSACTION_KEY_LIST).any():
            return None
        last = batches[-1]
        provenance = MetadataProvenance(last.last_offset, last.epoch, last.append_time_ms, True)
        try:
            folded = fold_values(values, np.fromiter(itertools.chain.from_iterable(offsets), np.int64, len(values)))
            image = folded.apply(self._image, provenance)
        except LogFoldError as exc:
            self.fail(exc.offset, f"Error loading metadata log record from offset {exc.offset}", exc)
            return self._clock_ns() - start
        elapsed = self._clock_ns() - start
        for k, b in enumerate(batches):
            self._count_batch(b, 0 if b.is_control else len(b.records), elapsed if k == len(batches) - 1 else 0)
        manifest = LogDeltaManifest(provenance, leader_and_epoch, self._num_batches, self._elapsed_ns,
                                    self._num_bytes, self._num_records)
        self.reset_to_image(image, seen_record=True)
        self._callback(MetadataDelta(image), image, manifest)
        return elapsed

    def _transaction_marker(self, api_key: int) -> None:
        txn = self._txn
        if api_key == _BEGIN:
            if txn in _OPEN:
                raise RuntimeError("Encountered BeginTransactionRecord while already in a transaction")
            self._txn = _STARTED
        elif api_key == _END:
            if txn not in _OPEN:
                raise RuntimeError("Encountered EndTransactionRecord without having seen a BeginTransactionRecord")
            self._txn = _ENDED
        else:
            if txn not in _OPEN:
                raise RuntimeError("Encountered AbortTransactionRecord without having seen a BeginTransactionRecord")
            self._txn = _ABORTED
            # The transaction's records go now (see the module doc): the image under an open
            # transaction is the state before its Begin.
            self._delta = MetadataDelta(self._image)
            self._delta_has_records = False

    def _publish_before_transaction(self, batch: Batch, index: int, records_before: int,
                                    leader_and_epoch: LeaderAndEpoch) -> None:
        """A Begin at ``index`` of ``batch`` with records before it (``records_before`` of them in
        this batch, not yet published): publish those first."""
        if index > 0:
            provenance = MetadataProvenance(batch.base_offset + index - 1, batch.epoch, batch.append_time_ms, False)
        else:
            provenance = MetadataProvenance(self._last_offset, self._last_epoch, self._last_time_ms, True)
        # this batch's batch count and bytes go with the delta that ends it, as Kafka
        manifest = LogDeltaManifest(provenance, leader_and_epoch, self._num_batches, self._elapsed_ns,
                                    self._num_bytes, self._num_records + records_before)
        log.debug("Publishing the delta between %d and %d before a transaction (%s)", self._image.offset,
                  provenance.last_contained_offset, "batch aligned" if index == 0 else "not batch aligned")
        self._apply_and_publish(self._delta, manifest)

    def maybe_flush_batches(self, leader_and_epoch: LeaderAndEpoch, is_offset_batch_aligned: bool = True) -> None:
        """End of a commit: publish the delta unless a transaction is open (an aborted one publishes
        the image as it was, at the new offset).  Nothing to do when no batch came since the last
        publication, or once stopped."""
        if self.failure is not None or self._num_batches == 0:
            return
        txn = self._txn
        if txn in _OPEN:
            log.debug("Not publishing: a transaction starting after offset %d is still open (%d batch(es) so far)",
                      self._image.offset, self._num_batches)
            return
        provenance = MetadataProvenance(self._last_offset, self._last_epoch, self._last_time_ms,
                                        is_offset_batch_aligned)
        manifest = LogDeltaManifest(provenance, leader_and_epoch, self._num_batches, self._elapsed_ns,
                                    self._num_bytes, self._num_records)
        self._apply_and_publish(self._delta, manifest)

    def _apply_and_publish(self, delta: MetadataDelta, manifest: LogDeltaManifest) -> None:
        provenance = manifest.provenance
        try:
            image = delta.apply(provenance)
        except Exception as exc:
            self.fail(provenance.last_contained_offset,
                       f"Error generating new metadata image from metadata delta between offset "
                       f"{self._image.offset} and {provenance.last_contained_offset}", exc)
            return
        seen = self._delta_has_records
        self.reset_to_image(image, seen_record=seen)
        self._callback(delta, image, manifest)

    def fail(self, offset: int, message: str, exc: BaseException | None) -> None:
        """Report a fault at ``offset`` and stop: the unpublished delta is dropped and nothing more
        is loaded or published (the loader also calls it for a snapshot that fails)."""
        if self.failure is not None:
            return
        self.failure = (offset, message)
        self._delta = MetadataDelta(self._image)
        self._txn = _NO
        self._fault_handler(message, exc)
