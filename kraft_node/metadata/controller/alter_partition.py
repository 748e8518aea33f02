"""AlterPartition: a partition leader asks the controller to change its ISR (Kafka's
ReplicationControlManager.alterPartition and validateAlterPartitionData, as of Kafka 4.x).

Why the controller validates so much: the leader's view may be stale (a newer leader epoch
was elected, the partition epoch moved on, a replica it wants back was fenced or restarted
since), and an ISR change applied against the wrong state would admit a replica that has
not caught up.  So the request is checked against the registration the controller has, in
Kafka's order, and each partition gets its own code:

====================================================  =========================================
condition                                             code
====================================================  =========================================
request's broker epoch is not the broker's            STALE_BROKER_EPOCH (the whole request)
topic id unknown (or the zero Uuid)                   UNKNOWN_TOPIC_ID
partition unknown                                     UNKNOWN_TOPIC_OR_PARTITION
leader or partition epoch *ahead* of ours             NOT_CONTROLLER (we are likely stale)
leader epoch behind ours                              FENCED_LEADER_EPOCH
sender is not the leader                              INVALID_REQUEST
partition epoch behind ours                           INVALID_UPDATE_VERSION
ISR not a duplicate-free subset of the replicas       INVALID_REQUEST
ISR without the leader                                INVALID_REQUEST
RECOVERING with more than one ISR member              INVALID_REQUEST
RECOVERED -> RECOVERING                               INVALID_REQUEST
an ISR member unregistered, shutting down, fenced,    INELIGIBLE_REPLICA
or (v3) at another broker epoch than registered
====================================================  =========================================

Versions: the schema here is Kafka 4.x's, versions 2-3 (0 and 1, which named topics and
answered OPERATION_NOT_ATTEMPTED / FENCED_LEADER_EPOCH / UNKNOWN_TOPIC_OR_PARTITION where
these answer INELIGIBLE_REPLICA / NEW_LEADER_ELECTED / UNKNOWN_TOPIC_ID, were removed by
KIP-896); another version is refused with UNSUPPORTED_VERSION.  v2 carries ``new_isr``
(broker ids, epoch not checked, i.e. -1), v3 ``new_isr_with_epochs``.

A change that completes a reassignment may move the leadership off the sender: its records
are written and the sender gets NEW_LEADER_ELECTED (it must refetch metadata).  Otherwise
the response carries the partition as it will be once the record is replayed (leader, ISR,
recovery state, epochs), which is the registration merged with the record.

Cost: a leader's plain ISR change (the common case: a restarted follower caught up) is
answered by the bulk path (:mod:`.alter_partition_bulk`: no PartitionChangeBuilder, the
checks cached per write, the same record and answer); anything else takes the full
validation above and the builder.  The controller answers a request through
:meth:`AlterPartitionManager.submit` (:class:`AlterPartitionWrite`): at most
``MAX_COST_PER_EVENT`` units of partitions per write event, the rest in later events queued
behind whatever is queued meanwhile, the answer once all are committed.  Each partition gets
the answer one event would give it, unless another write changed it in between (then it is
judged on its new state, as a separate request would be) or the controller failed over
(NOT_CONTROLLER for the partitions left).
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

from kraft_node.metadata.controller.alter_partition_bulk import BulkAlterPartition
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.partition_change import Election
from kraft_node.metadata.controller.partition_changes import BUDGET_CHECK_EVERY, PartitionChangeContext
from kraft_node.metadata.controller.replication_control import (
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionRegistration,
    TopicControlInfo,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kraft_storage.messages.runtime import ZERO_UUID

log = logging.getLogger("kraft.controller.replication")

#: The AlterPartition versions this controller answers (Kafka 4.x's).
LOWEST_VERSION, HIGHEST_VERSION = AlterPartitionRequest.LOWEST_VERSION, AlterPartitionRequest.HIGHEST_VERSION

#: A v2 ISR member's epoch: "do not check" (Kafka's newIsrToSimpleNewIsrWithBrokerEpochs).
UNCHECKED_BROKER_EPOCH = -1

#: What one partition costs a write, in units: answered by the bulk path (or refused for an
#: unknown topic), and through the full validation and the PartitionChangeBuilder.  Measured
#: in process (load ~2.5): building ~8.5 us and ~42 us a partition, then ~3 us of encoding and
#: ~7-15 us of replay either way, so ~20 us and ~55 us a partition of the event
#: (``bench_alter_partition.py --breakdown``; benchmarks/results/s20/alter_partition.md).
BULK_COST, FULL_COST = 1, 3

#: The units one write event spends before the rest of the request waits for a later event:
#: 1,000 bulk partitions (~17-20 ms) or 333 built ones (Kafka's rule for the controller: no
#: event above ~50 ms; a 10,000-partition request was one event of 0.6 s in process and of
#: 1.7-2.1 s on the loaded 3-node cluster).
MAX_COST_PER_EVENT = 1_000

#: On a running controller a slice also ends once building it has taken this much of the
#: clock the partition changes are given (``PartitionChangeContext.clock_ns``: the controller
#: thread's CPU time on a node; checked every ``BUDGET_CHECK_EVERY`` partitions, as the
#: lifecycle results' budget), so a loaded machine gets shorter slices: the event that writes
#: a slice also encodes and replays it, ~2.3x the building time of bulk partitions, so 8 ms of
#: building is a ~20 ms event.
#: (Without a clock -- the simulator, unit tests -- the cost alone bounds a slice,
#: deterministically.)
BUILD_BUDGET_NS = 8_000_000


def valid_isr(replicas: Sequence[int], isr: Sequence[int]) -> bool:
    """Kafka's Replicas.validateIsr: every ISR member is a replica, none negative, none twice
    (an empty ISR is valid here; the leader check rejects it)."""
    return len(set(isr)) == len(isr) and all(r >= 0 for r in isr) and set(isr) <= set(replicas)


class AlterPartitionManager:
    """The AlterPartition write (see the module doc)."""

    def __init__(self, ctx: PartitionChangeContext):
        self.ctx = ctx
        #: partitions a write may work on before the rest waits for a later event, counted in
        #: :data:`BULK_COST` / :data:`FULL_COST` units (``submit``; see :class:`AlterPartitionWrite`)
        self.max_cost_per_event = MAX_COST_PER_EVENT
        #: the building time a slice may take on ``ctx.clock_ns`` (``submit``; when one is wired)
        self.build_budget_ns = BUILD_BUDGET_NS

    def alter_partition(self, request: Any, version: int) -> ControllerResult[Any]:
        """Answer an AlterPartitionRequest (data) sent at ``version`` in one result: one
        PartitionChangeRecord per partition that changes (non-atomic, as Kafka's) and the
        response.  ApiError UNSUPPORTED_VERSION for a version outside 2-3, STALE_BROKER_EPOCH
        for a sender whose epoch is not its registration's.  (The controller answers requests
        through :meth:`submit`, which bounds each event; this is the unbounded form.)"""
        self.check_request(request, version)
        records: list[ApiMessageAndVersion] = []
        answers: list[tuple[int, Any]] = []
        self.alter_slice(request, version, (0, 0), None, records, answers)
        return ControllerResult.of(records, assemble_response(request, answers))

    def submit(self, controller: Any, request: Any, version: int, *,
               deadline_ns: int | None = None) -> Any:
        """Answer ``request`` on ``controller`` (a QuorumController: ``append_write``) in as
        many write events as its cost needs: a ControllerFuture of the AlterPartitionResponse,
        completed once every slice's records are committed (see :class:`AlterPartitionWrite`)."""
        return AlterPartitionWrite(self, controller, request, version, deadline_ns).start()

    def check_request(self, request: Any, version: int) -> None:
        """What refuses the whole request: ApiError UNSUPPORTED_VERSION, STALE_BROKER_EPOCH."""
        if not LOWEST_VERSION <= version <= HIGHEST_VERSION:
            raise ApiError(Errors.UNSUPPORTED_VERSION,
                           f"AlterPartition version {version} is not supported: this controller answers versions "
                           f"{LOWEST_VERSION} to {HIGHEST_VERSION}.")
        self.ctx.cluster.check_broker_epoch(request.broker_id, request.broker_epoch)

    def alter_slice(self, request: Any, version: int, cursor: tuple[int, int], max_cost: int | None,
                    records: list[ApiMessageAndVersion], answers: list[tuple[int, Any]],
                    deadline_ns: int | None = None) -> tuple[int, int] | None:
        """Work on the request's partitions from ``cursor`` (topic index, partition index in
        it) in request order until ``max_cost`` units are spent (None: no bound) or
        ``ctx.clock_ns`` passes ``deadline_ns`` (None: no deadline): their records appended to ``records``
        and their answers, as ``(topic index, PartitionData)``, to ``answers``.  Returns where
        the next slice starts, or None when the request is done.  At least one partition is
        worked on.  The request itself is not checked here (:meth:`check_request`)."""
        ctx = self.ctx
        broker_id = request.broker_id
        topics = request.topics
        t_index, p_index = cursor
        cost = worked = 0
        past = ctx.past
        debug = log.isEnabledFor(logging.DEBUG)
        with ctx.reading_once():
            bulk = BulkAlterPartition(ctx)
            while t_index < len(topics):
                topic_data = topics[t_index]
                partitions = topic_data.partitions
                topic = None if topic_data.topic_id == ZERO_UUID else ctx.replication.topic(topic_data.topic_id)
                if topic is None:
                    if p_index < len(partitions):
                        log.info("Rejecting AlterPartition request for unknown topic ID %s.", topic_data.topic_id)
                    while p_index < len(partitions):
                        if worked and ((max_cost is not None and cost >= max_cost)
                                       or (worked % BUDGET_CHECK_EVERY == 0 and past(deadline_ns))):
                            return t_index, p_index
                        worked += 1
                        answers.append((t_index, AlterPartitionResponse.PartitionData(
                            partition_index=partitions[p_index].partition_index,
                            error_code=Errors.UNKNOWN_TOPIC_ID)))
                        cost += BULK_COST
                        p_index += 1
                else:
                    while p_index < len(partitions):
                        if worked and ((max_cost is not None and cost >= max_cost)
                                       or (worked % BUDGET_CHECK_EVERY == 0 and past(deadline_ns))):
                            return t_index, p_index
                        worked += 1
                        partition_data = partitions[p_index]
                        done = bulk.change(broker_id, topic, partition_data, version)
                        if isinstance(done, tuple):
                            record, answer = done
                            if record is not None:
                                records.append(record)
                                if debug:
                                    log.debug("Node %d has altered ISR for %s-%d to %s.", broker_id, topic.name,
                                              partition_data.partition_index, record.message.isr)
                            cost += BULK_COST
                        else:
                            answer = self._alter_one(broker_id, topic, partition_data, version, records)
                            cost += FULL_COST
                        answers.append((t_index, answer))
                        p_index += 1
                t_index += 1
                p_index = 0
        return None

    def _alter_one(self, broker_id: int, topic: TopicControlInfo, data: Any, version: int,
                   records: list[ApiMessageAndVersion]) -> Any:
        ctx = self.ctx
        pid = data.partition_index
        isr_with_epochs = _isr_with_epochs(data, version)
        partition: PartitionRegistration | None = topic.parts.get(pid)
        error = self._validate(broker_id, topic, pid, partition, data, isr_with_epochs)
        if error is not Errors.NONE:
            return AlterPartitionResponse.PartitionData(partition_index=pid, error_code=error)
        assert partition is not None
        builder = ctx.builder(topic, pid, partition)
        if ctx.unclean_enabled(topic.name):
            builder.set_election(Election.UNCLEAN)
        builder.set_target_isr([b for b, _ in isr_with_epochs])
        builder.set_target_leader_recovery_state(LeaderRecoveryState.of(data.leader_recovery_state))
        record = builder.build()
        if record is not None:
            records.append(record)
            change = record.message
            partition = partition.merge(change)
            log.debug("Node %d has altered ISR for %s-%d to %s.", broker_id, topic.name, pid, change.isr)
            if change.leader != broker_id and change.leader != NO_LEADER_CHANGE:
                # Completing a reassignment moved the leadership: the records stand, and the
                # old leader must refetch metadata before it tries again.
                log.info("AlterPartition request from node %d for %s-%d completed the ongoing partition "
                         "reassignment and triggered a leadership change. Returning NEW_LEADER_ELECTED.",
                         broker_id, topic.name, pid)
                return AlterPartitionResponse.PartitionData(partition_index=pid,
                                                            error_code=Errors.NEW_LEADER_ELECTED)
            if partition.is_reassigning:
                log.info("AlterPartition request from node %d for %s-%d completed the ongoing partition "
                         "reassignment.", broker_id, topic.name, pid)
        return AlterPartitionResponse.PartitionData(
            partition_index=pid, error_code=Errors.NONE, leader_id=partition.leader, isr=list(partition.isr),
            leader_recovery_state=int(partition.leader_recovery_state), leader_epoch=partition.leader_epoch,
            partition_epoch=partition.partition_epoch)

    def _validate(self, broker_id: int, topic: TopicControlInfo, pid: int, partition: PartitionRegistration | None,
                  data: Any, isr_with_epochs: list[tuple[int, int]]) -> Errors:
        """Kafka's validateAlterPartitionData, in its order (see the module doc's table)."""
        name = topic.name
        if partition is None:
            log.info("Rejecting AlterPartition request for unknown partition %s-%d.", name, pid)
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        # An epoch ahead of ours means this controller is probably no longer active.
        if data.leader_epoch > partition.leader_epoch:
            log.debug("Rejecting AlterPartition request from node %d for %s-%d because the current leader epoch "
                      "is %d, which is greater than the local value %d.", broker_id, name, pid, data.leader_epoch,
                      partition.leader_epoch)
            return Errors.NOT_CONTROLLER
        if data.partition_epoch > partition.partition_epoch:
            log.debug("Rejecting AlterPartition request from node %d for %s-%d because the current partition "
                      "epoch is %d, which is greater than the local value %d.", broker_id, name, pid,
                      data.partition_epoch, partition.partition_epoch)
            return Errors.NOT_CONTROLLER
        if data.leader_epoch < partition.leader_epoch:
            log.debug("Rejecting AlterPartition request from node %d for %s-%d because the current leader epoch "
                      "is %d, not %d.", broker_id, name, pid, partition.leader_epoch, data.leader_epoch)
            return Errors.FENCED_LEADER_EPOCH
        if broker_id != partition.leader:
            log.info("Rejecting AlterPartition request from node %d for %s-%d because the current leader is %d.",
                     broker_id, name, pid, partition.leader)
            return Errors.INVALID_REQUEST
        if data.partition_epoch < partition.partition_epoch:
            log.info("Rejecting AlterPartition request from node %d for %s-%d because the current partition epoch "
                     "is %d, not %d.", broker_id, name, pid, partition.partition_epoch, data.partition_epoch)
            return Errors.INVALID_UPDATE_VERSION
        new_isr = [b for b, _ in isr_with_epochs]
        if not valid_isr(partition.replicas, new_isr):
            log.error("Rejecting AlterPartition request from node %d for %s-%d because it specified an invalid ISR "
                      "%s.", broker_id, name, pid, new_isr)
            return Errors.INVALID_REQUEST
        if partition.leader not in new_isr:
            log.error("Rejecting AlterPartition request from node %d for %s-%d because it specified an invalid ISR "
                      "%s that doesn't include itself.", broker_id, name, pid, new_isr)
            return Errors.INVALID_REQUEST
        try:
            recovery = LeaderRecoveryState.of(data.leader_recovery_state)
        except ValueError as exc:
            # Kafka throws out of the whole request here; one bad partition answers for itself.
            log.info("Rejecting AlterPartition request from node %d for %s-%d: %s.", broker_id, name, pid, exc)
            return Errors.INVALID_REQUEST
        if recovery is LeaderRecoveryState.RECOVERING and len(new_isr) > 1:
            log.info("Rejecting AlterPartition request from node %d for %s-%d because the ISR %s had more than one "
                     "replica while the leader was still recovering from an unclean leader election.",
                     broker_id, name, pid, new_isr)
            return Errors.INVALID_REQUEST
        if (partition.leader_recovery_state is LeaderRecoveryState.RECOVERED
                and recovery is LeaderRecoveryState.RECOVERING):
            log.info("Rejecting AlterPartition request from node %d for %s-%d because the leader recovery state "
                     "cannot change from RECOVERED to RECOVERING.", broker_id, name, pid)
            return Errors.INVALID_REQUEST
        ineligible = self.ineligible_replicas_for_isr(isr_with_epochs, partition)
        if ineligible:
            log.info("Rejecting AlterPartition request from node %d for %s-%d because it specified ineligible "
                     "replicas %s in the new ISR %s.", broker_id, name, pid, ", ".join(ineligible), new_isr)
            return Errors.INELIGIBLE_REPLICA
        return Errors.NONE

    def ineligible_replicas_for_isr(self, isr_with_epochs: Sequence[tuple[int, int]],
                                    partition: PartitionRegistration) -> list[str]:
        """Kafka's ineligibleReplicasForIsr, as ``"<id> (<reason>)"`` strings: not registered,
        shutting down, fenced, or a broker epoch other than the registered one (-1: unchecked).
        A broker a lifecycle change is still taking out of this partition (its fencing,
        unregistration or offline directory not yet all written) counts as fenced."""
        ctx = self.ctx
        dirs = dict(zip(partition.replicas, partition.directories))
        out = []
        for broker_id, broker_epoch in isr_with_epochs:
            registration = ctx.cluster.registration(broker_id)
            if registration is None:
                out.append(f"{broker_id} (not registered)")
            elif registration.in_controlled_shutdown:
                out.append(f"{broker_id} (shutting down)")
            elif registration.fenced or ctx.excluded(broker_id, dirs.get(broker_id)):
                out.append(f"{broker_id} (fenced)")
            elif broker_epoch != UNCHECKED_BROKER_EPOCH and registration.epoch != broker_epoch:
                out.append(f"{broker_id} (broker epoch mismatch: requested={broker_epoch} "
                           f"VS expected={registration.epoch})")
        return out


def _isr_with_epochs(data: Any, version: int) -> list[tuple[int, int]]:
    """``[(broker id, broker epoch)]`` of the requested ISR: v3's NewIsrWithEpochs, or v2's
    NewIsr with every epoch unchecked."""
    if version >= 3:
        return [(s.broker_id, s.broker_epoch) for s in data.new_isr_with_epochs]
    return [(b, UNCHECKED_BROKER_EPOCH) for b in data.new_isr]


def assemble_response(request: Any, answers: Sequence[tuple[int, Any]]) -> Any:
    """The AlterPartitionResponse of ``answers`` (``(topic index, PartitionData)`` in request
    order): one TopicData per topic of the request, in its order."""
    response = AlterPartitionResponse()
    topics = [AlterPartitionResponse.TopicData(topic_id=t.topic_id) for t in request.topics]
    response.topics = topics
    for t_index, answer in answers:
        topics[t_index].partitions.append(answer)
    return response


def error_code_of(exc: BaseException) -> Errors:
    """The code a partition answers when the write holding it failed with ``exc``."""
    return exc.error if isinstance(exc, ApiError) else Errors.UNKNOWN_SERVER_ERROR


class AlterPartitionWrite:
    """One AlterPartition request answered over as many write events as it costs
    (``AlterPartitionManager.max_cost_per_event`` units each), so that no event runs long
    (Kafka's rule for the controller: no event above ~50 ms).

    Slice by slice:

    * the first slice is the request's write event (queued with the request's deadline); it
      refuses the whole request as one event would (unsupported version, stale broker epoch),
      and a failure of it -- before or after its records are written (a failover before they
      commit) -- fails the whole request, as today;
    * a slice that leaves partitions over queues the next slice as a new write event at the end
      of the queue, behind whatever is already queued (heartbeats, other requests), with no
      deadline: the request was accepted;
    * a later slice reads the state as it is when it runs, as a separate request would: a
      partition that another write changed in between is validated against its new epochs, a
      sender re-registered in between answers STALE_BROKER_EPOCH for every partition left;
      metadata.version, ELR and the topic settings are read afresh;
    * a later slice that fails (NOT_CONTROLLER after a failover, the event queue closing ...)
      answers that error's code for its partitions and every partition after them; the slices
      after a failure write nothing;
    * the request is answered once every slice is done, i.e. once the last records written
      are committed (the purgatory completes in offset order, so every earlier slice's are
      too), with the partitions in request order.
    """

    __slots__ = ("manager", "controller", "request", "version", "deadline_ns", "future", "cursor", "answers",
                 "pending", "first_failure", "failure", "slices")

    def __init__(self, manager: AlterPartitionManager, controller: Any, request: Any, version: int,
                 deadline_ns: int | None) -> None:
        self.manager = manager
        self.controller = controller
        self.request = request
        self.version = version
        self.deadline_ns = deadline_ns
        from kraft_node.metadata.controller.quorum_controller import ControllerFuture
        self.future: Any = ControllerFuture()
        #: where the next slice starts (None: every partition has its answer)
        self.cursor: tuple[int, int] | None = (0, 0)
        #: (topic index, PartitionData) of every partition answered so far, in request order
        self.answers: list[tuple[int, Any]] = []
        #: slices queued or written and not yet done
        self.pending = 0
        #: the first slice's failure: fails the whole request
        self.first_failure: BaseException | None = None
        #: a later slice's failure: its code answers the partitions left
        self.failure: BaseException | None = None
        self.slices = 0

    def start(self) -> Any:
        self._queue(first=True)
        return self.future

    def _queue(self, *, first: bool) -> None:
        self.pending += 1
        index = self.slices
        self.slices += 1
        start = self.cursor
        answered = len(self.answers)
        future = self.controller.append_write(
            "alterPartition" if first else "alterPartitionSlice",
            lambda: self._slice(first), deadline_ns=self.deadline_ns if first else None)
        future.add_done_callback(lambda f: self._slice_done(f, index, start, answered))

    def _slice(self, first: bool) -> ControllerResult[None]:
        """One slice's write (on the controller's loop)."""
        manager = self.manager
        request = self.request
        if first:
            manager.check_request(request, self.version)
        elif self.failure is not None or self.first_failure is not None:
            return ControllerResult.of([], None)  # a slice before failed: nothing more is written
        else:
            try:
                manager.ctx.cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
            except ApiError as exc:
                self.failure = exc
                log.info("AlterPartition request from node %d: the sender's registration changed between slices "
                         "(%s); answering the %s partitions left.", request.broker_id, exc.message,
                         exc.error.name)
                return ControllerResult.of([], None)
        records: list[ApiMessageAndVersion] = []
        assert self.cursor is not None
        deadline = manager.ctx.result_deadline_ns(manager.build_budget_ns)
        self.cursor = manager.alter_slice(request, self.version, self.cursor, manager.max_cost_per_event, records,
                                          self.answers, deadline)
        if self.cursor is not None:
            self._queue(first=False)
        return ControllerResult.of(records, None)

    def _slice_done(self, future: Any, index: int, start: tuple[int, int] | None, answered: int) -> None:
        self.pending -= 1
        exc = future.exception()
        if exc is not None:
            if index == 0:
                self.first_failure = exc
            elif self.failure is None or answered < len(self.answers):
                # the slice's own partitions (answered as if written) take its error, and so
                # does every partition after them (an earlier slice's failure reported after a
                # later one's moves the line back)
                self.failure = exc
                del self.answers[answered:]
                self.cursor = start
        if self.pending == 0:
            self._finish()

    def _finish(self) -> None:
        if self.first_failure is not None:
            self.future.set_exception(self.first_failure)
            return
        answers = self.answers
        if self.failure is not None and self.cursor is not None:
            code = error_code_of(self.failure)
            t_index, p_index = self.cursor
            topics = self.request.topics
            while t_index < len(topics):
                partitions = topics[t_index].partitions
                for data in partitions[p_index:]:
                    answers.append((t_index, AlterPartitionResponse.PartitionData(
                        partition_index=data.partition_index, error_code=code)))
                t_index += 1
                p_index = 0
        self.future.set_result(assemble_response(self.request, answers))
