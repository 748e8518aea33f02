"""Kafka's ``ReplicationControlTestContext`` (ReplicationControlManagerTest), re-stated: the
managers a ReplicationControlManager works with, on one SnapshotRegistry, and the helpers
Kafka's tests drive them with.  State changes only through :meth:`replay`, as in Kafka: a
helper that "does" something (registers, unfences, creates a topic) builds records and replays
them.

* a FeatureControlManager at the chosen metadata.version (Kafka: ``latestTesting()``);
* a ClusterControlManager on a manual clock, session timeout 1,000 ms, activated (so the
  heartbeat manager exists and placement sees usable brokers);
* a ConfigurationControlManager with Kafka's ``ConfigurationValidator.NO_OP`` (as Kafka's
  context: its tests set made-up topic configs such as ``foo=notNull``), no policy;
* the ReplicationControlManager under test with a StripedReplicaPlacer over Kafka's
  ``MockRandom`` (so placements are Kafka's exact ones), ``max_elections_per_imbalance``
  unbounded and ``default_replication_factor`` 3 (Kafka's Builder default the test inherits).

Brokers are registered by replaying RegisterBrokerRecord v3 with epoch ``100 + id``
(``defaultBrokerEpoch``), listener PLAINTEXT localhost:9092+id, and one log directory
``TESTBROKER0000<id>DIRAAAA`` (ids padded to five digits, as Kafka's ``registerBrokers``).

Heartbeats and stale-broker fencing go through the ClusterControlManager (Kafka's
``processBrokerHeartbeat`` / ``maybeFenceOneStaleBroker``), with whatever partition changes
its broker-lifecycle hooks add.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from kraft_node.metadata.configs.validator import NO_OP_VALIDATOR
from kraft_node.metadata.controller.cluster_control import ClusterControlManager
from kraft_node.metadata.controller.configuration_control import ConfigurationControlManager
from kraft_node.metadata.controller.features import FeatureControlManager, QuorumFeatures
from kraft_node.metadata.controller.replication_control import PartitionRegistration, ReplicationControlManager
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.placement import MockRandom, StripedReplicaPlacer
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
from kraft_node.protocol.generated.create_partitions import CreatePartitionsRequest
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import SnapshotRegistry

CLUSTER_ID = "fPZv1VBsRFmnlRvmGcOW9w"
BROKER_SESSION_TIMEOUT_MS = 1000
CreatableTopic = CreateTopicsRequest.CreatableTopic


def default_broker_epoch(broker_id: int) -> int:
    """Kafka's ``defaultBrokerEpoch``."""
    return broker_id + 100


def broker_dir(broker_id: int) -> Uuid:
    """``TESTBROKER<5-digit id>DIRAAAA``, the one directory ``register_brokers`` gives a broker."""
    return Uuid.from_string(f"TESTBROKER{broker_id:05d}DIRAAAA")


class ManualClock:
    """Milliseconds that move only when told (Kafka's MockTime)."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def sleep(self, ms: int) -> None:
        self.now += ms


def creatable_topic(name: str, num_partitions: int = -1, replication_factor: int = -1, *,
                    assignments: Sequence[Sequence[int]] = (),
                    configs: Mapping[str, str | None] | None = None) -> Any:
    """A CreateTopicsRequest.CreatableTopic (manual assignments numbered from 0)."""
    T = CreateTopicsRequest
    return T.CreatableTopic(
        name=name, num_partitions=num_partitions, replication_factor=replication_factor,
        assignments=[T.CreatableReplicaAssignment(partition_index=i, broker_ids=list(b))
                     for i, b in enumerate(assignments)],
        configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])


def create_topics_request(*topics: Any, validate_only: bool = False) -> Any:
    return CreateTopicsRequest(topics=list(topics), timeout_ms=60000, validate_only=validate_only)


def create_partitions_topic(name: str, count: int, assignments: Sequence[Sequence[int]] | None = None) -> Any:
    T = CreatePartitionsRequest
    return T.CreatePartitionsTopic(
        name=name, count=count,
        assignments=None if assignments is None else [T.CreatePartitionsAssignment(broker_ids=list(b))
                                                      for b in assignments])


def find_result(response: Any, name: str) -> Any:
    """Kafka's ``response.topics().find(name)``."""
    found = [t for t in response.topics if t.name == name]
    assert len(found) == 1, f"{len(found)} results for {name!r} in {response!r}"
    return found[0]


def run_stale_broker_task(ctx: Any) -> list[list[ApiMessageAndVersion]]:
    """Run the stale-broker task until it says it has nothing left (its response False),
    replaying each result; the results' records."""
    results = []
    while True:
        result = ctx.cluster_control.fence_stale_broker()
        results.append(result.records)
        ctx.replay(result.records)
        if not result.response:
            return results


class ReplicationControlTestContext:
    """See the module doc.  ``replay`` gives each record the next offset (the broker
    registration offsets a heartbeat must reach to unfence)."""

    def __init__(self, metadata_version: MetadataVersion | None = None, *,
                 default_num_partitions: int = 1, default_replication_factor: int = 3,
                 eligible_leader_replicas_enabled: bool | None = None,
                 configuration_control: Callable[[Any], ConfigurationControlManager] | None = None) -> None:
        self.metadata_version = metadata_version if metadata_version is not None else MetadataVersion.latest_testing()
        self.registry = SnapshotRegistry()
        self.time = ManualClock()
        self.random = MockRandom()
        self.next_offset = 0
        self.configuration_control = (configuration_control(self.registry) if configuration_control is not None
                                      else ConfigurationControlManager(self.registry, validator=NO_OP_VALIDATOR))
        self.feature_control = FeatureControlManager(
            self.registry, QuorumFeatures(0, QuorumFeatures.default_supported_feature_map(True), [0]))
        self.feature_control.replay(m.FeatureLevelRecord(name="metadata.version",
                                                         feature_level=self.metadata_version.feature_level))
        self.replication_control: ReplicationControlManager
        self.cluster_control = ClusterControlManager(
            self.registry, cluster_id=CLUSTER_ID, feature_control=self.feature_control, clock_ms=self.time,
            session_timeout_ms=BROKER_SESSION_TIMEOUT_MS,
            has_leaderships=lambda b: self.replication_control.has_leaderships(b))
        self.feature_control.cluster_support = self.cluster_control
        elr: Callable[[], bool] | None = None
        if eligible_leader_replicas_enabled is not None:
            enabled = eligible_leader_replicas_enabled
            elr = lambda: enabled  # noqa: E731
        self.replication_control = ReplicationControlManager(
            self.registry, self.configuration_control, cluster_control=self.cluster_control,
            feature_control=self.feature_control, replica_placer=StripedReplicaPlacer(self.random),
            default_num_partitions=default_num_partitions, default_replication_factor=default_replication_factor,
            max_elections_per_imbalance=2**31 - 1, eligible_leader_replicas_enabled=elr)
        self.cluster_control.activate()
        self._replayers: dict[int, Callable[[Any, int], None]] = {}
        for rt in ClusterControlManager.RECORD_TYPES:
            self._replayers[rt.API_KEY] = self.cluster_control.replay
        for rt in ReplicationControlManager.RECORD_TYPES:
            self._replayers[rt.API_KEY] = self.replication_control.replay
        self._replayers[m.ConfigRecord.API_KEY] = self.configuration_control.replay
        self._replayers[m.FeatureLevelRecord.API_KEY] = lambda r, _o: self.feature_control.replay(r)

    # -- replay ------------------------------------------------------------------------------
    def replay(self, records: Iterable[ApiMessageAndVersion]) -> None:
        """Apply each record, at the next offset, with the manager that owns its type."""
        for r in records:
            self._replayers[r.message.API_KEY](r.message, self.next_offset)
            self.next_offset += 1

    # -- brokers -----------------------------------------------------------------------------
    def register_brokers(self, *broker_ids: int) -> None:
        self.register_brokers_with_dirs({b: [broker_dir(b)] for b in broker_ids})

    def register_brokers_with_dirs(self, dirs_by_broker: Mapping[int, Sequence[Uuid]]) -> None:
        """Replay a RegisterBrokerRecord (v3, fenced) per broker, in the mapping's order."""
        for broker_id, dirs in dirs_by_broker.items():
            record = m.RegisterBrokerRecord(
                broker_id=broker_id, broker_epoch=default_broker_epoch(broker_id), rack=None, log_dirs=list(dirs),
                end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="localhost",
                                                                  port=9092 + broker_id, security_protocol=0)],
                fenced=True)
            self.replay([ApiMessageAndVersion(record, 3)])

    def unfence_brokers(self, *broker_ids: int) -> None:
        """A caught-up heartbeat (wantFence=false) from each; each must come back unfenced."""
        for broker_id in broker_ids:
            epoch = default_broker_epoch(broker_id)
            self.cluster_control.track_broker_heartbeat(broker_id, epoch)
            result = self.cluster_control.process_broker_heartbeat(BrokerHeartbeatRequest(
                broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=self.next_offset,
                want_fence=False, want_shut_down=False))
            reply = result.response
            assert (reply.is_caught_up, reply.is_fenced, reply.in_controlled_shutdown, reply.should_shut_down) == (
                True, False, False, False), reply
            self.replay(result.records)

    def in_controlled_shutdown_brokers(self, *broker_ids: int) -> None:
        """Replay BrokerRegistrationChangeRecord(inControlledShutdown=1) v1 for each."""
        for broker_id in broker_ids:
            self.replay([ApiMessageAndVersion(m.BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=default_broker_epoch(broker_id), in_controlled_shutdown=1), 1)])

    def fence_brokers(self, *broker_ids: int) -> None:
        """Kafka's ``fenceBrokers``: let a session timeout pass, heartbeat every other broker,
        then fence stale brokers one at a time until none is left; exactly ``broker_ids`` end
        fenced.  (A session expires strictly after the timeout; Kafka's context gets there with
        a session timeout that its unit conversion makes 0.)"""
        self.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
        others = [b for b in self.cluster_control.brokers() if b not in broker_ids]
        self.unfence_brokers(*others)
        while True:
            result = self.cluster_control.fence_stale_broker()
            self.replay(result.records)
            if not result.response:
                break
        assert self.fenced_broker_ids() == set(broker_ids)

    def fenced_broker_ids(self) -> set[int]:
        return self.cluster_control.fenced_broker_ids()

    def current_broker_epoch(self, broker_id: int) -> int:
        registration = self.cluster_control.registration(broker_id)
        assert registration is not None, f"No current registration for broker {broker_id}"
        return registration.epoch

    # -- topics ------------------------------------------------------------------------------
    def create_test_topic(self, name: str, replicas_per_partition: Sequence[Sequence[int]],
                          configs: Mapping[str, str] | None = None, expected_error: Errors | None = None) -> Any:
        """Create ``name`` with a manual assignment (partition i on ``replicas_per_partition[i]``);
        assert the result's error (default NONE) and, on success, its partition count and
        replication factor, then replay.  Returns the CreatableTopicResult."""
        assert replicas_per_partition, "a manual assignment needs at least one partition"
        expected = Errors.NONE if expected_error is None else expected_error
        request = create_topics_request(creatable_topic(name, assignments=replicas_per_partition, configs=configs))
        result = self.replication_control.create_topics(request, {name})
        topic = find_result(result.response, name)
        assert Errors(topic.error_code) == expected, (topic.error_code, topic.error_message)
        if expected == Errors.NONE:
            assert topic.num_partitions == len(replicas_per_partition)
            assert topic.replication_factor == len(replicas_per_partition[0])
            self.replay(result.records)
        return topic

    def create_test_topic_placed(self, name: str, num_partitions: int, replication_factor: int,
                                 expected_error: Errors | None = None) -> Any:
        """Create ``name`` placed by the placer (Kafka's ``createTestTopic(name, n, rf, code)``)."""
        expected = Errors.NONE if expected_error is None else expected_error
        request = create_topics_request(creatable_topic(name, num_partitions, replication_factor))
        result = self.replication_control.create_topics(request, {name})
        topic = find_result(result.response, name)
        assert Errors(topic.error_code) == expected, (topic.error_code, topic.error_message)
        if expected == Errors.NONE:
            self.replay(result.records)
        return topic

    def delete_topic(self, topic_id: Uuid) -> None:
        """Delete one topic: exactly one RemoveTopicRecord for it, then replay."""
        result = self.replication_control.delete_topics([topic_id])
        assert set(result.response) == {topic_id}
        assert result.response[topic_id].error == Errors.NONE
        assert len(result.records) == 1
        record = result.records[0].message
        assert isinstance(record, m.RemoveTopicRecord) and record.topic_id == topic_id
        self.replay(result.records)

    def create_partitions(self, count: int, name: str, replicas: Sequence[Sequence[int]],
                          expected_error: Errors) -> None:
        """Grow ``name`` to ``count`` partitions with a manual assignment; assert the error; replay."""
        result = self.replication_control.create_partitions([create_partitions_topic(name, count, replicas)])
        assert len(result.response) == 1
        assert result.response[0].name == name
        assert Errors(result.response[0].error_code) == expected_error, result.response[0]
        self.replay(result.records)

    def alter_topic_config(self, topic: str, key: str, value: str | None) -> None:
        self.replay([ApiMessageAndVersion(m.ConfigRecord(resource_type=2, resource_name=topic, name=key,
                                                         value=value), 0)])

    def partition(self, topic_id: Uuid, partition_id: int) -> PartitionRegistration | None:
        return self.replication_control.partition(topic_id, partition_id)
