"""The striped replica placer and the JDK pieces it reproduces.

* Kafka's StripedReplicaPlacerTest, PartitionAssignmentTest and TopicAssignmentTest
  (``metadata/src/test/java/org/apache/kafka/metadata/placement/``), re-stated with their exact
  inputs, outputs and messages; each placer case runs on every path (``place``,
  ``place_columns`` on the native and the pure kernel, and the object model that a random
  overriding ``next`` falls back to).
* ``java.util.Random``, ``Collections.shuffle`` and ``HashMap`` iteration order against values
  printed by OpenJDK 17 (the ``Random(42)`` / ``Random(0)`` ones are also the well-known ones).
* Placements of clusters Kafka's tests do not cover (many racks, a HashMap tree bucket, fenced
  brokers, shuffles), compared with the output of Kafka's own ``StripedReplicaPlacer`` run on
  OpenJDK 17 with the same seeds.
* Hypothesis: the kernels (native, pure) and the object model agree, replicas and random
  state; replicas are distinct, RF long, led by an unfenced broker; no fenced broker when every
  rack has RF unfenced ones.
"""
from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Iterator
from types import ModuleType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_node.metadata.controller import heartbeats
from kraft_node.metadata.controller.cluster_control import DirectoryId
from kraft_node.metadata.placement import (
    InvalidReplicationFactorError,
    JavaRandom,
    MockRandom,
    PartitionAssignment,
    PlacementError,
    PlacementSpec,
    StripedReplicaPlacer,
    TopicAssignment,
    UsableBroker,
    hash_map_order,
    java_shuffle,
    striped,
)
from kraft_node.metadata.placement.java_random import (
    java_string_compare_key,
    java_string_hash,
    sorted_optional_strings,
)
from kraft_node.metadata.placement.striped import BrokerList, RackList
from kraft_node.protocol.errors import Errors
from kraft_storage.messages.runtime import Uuid

NATIVE = importlib.import_module("kraft_node._native._placement")
PURE = importlib.import_module("kraft_node._pure._placement")


class Cluster:
    """A ClusterDescriber over a list (Kafka's test describer: every default dir MIGRATING)."""

    def __init__(self, brokers: list[UsableBroker], default_dir: Uuid = DirectoryId.MIGRATING):
        self.brokers = brokers
        self.dir = default_dir

    def usable_brokers(self) -> Iterator[UsableBroker]:
        return iter(self.brokers)

    def default_dir(self, broker_id: int) -> Uuid:
        return self.dir


class ForcedObjectModel(MockRandom):
    """MockRandom drawing through an overridden ``next``: the placer cannot hand it to the
    kernel, so it places with :meth:`RackList.place` (the reference object model)."""

    def next(self, bits: int) -> int:
        return super().next(bits)


def B(broker_id: int, rack: str | None, fenced: bool) -> UsableBroker:
    return UsableBroker(broker_id, rack, fenced)


def partition_assignment(replicas: list[int]) -> PartitionAssignment:
    """Kafka's PartitionAssignmentTest.partitionAssignment: every directory MIGRATING."""
    return PartitionAssignment.of(replicas, lambda _broker: DirectoryId.MIGRATING)


# -- the paths every placer case runs on --------------------------------------------------

PATHS = ["place-native", "place-pure", "columns-native", "columns-pure", "object-model"]


def place_rows(path: str, monkeypatch: pytest.MonkeyPatch, random: MockRandom | JavaRandom | None,
               spec: PlacementSpec, brokers: list[UsableBroker],
               placer: StripedReplicaPlacer | None = None) -> list[list[int]]:
    """The replicas of ``spec`` by ``path`` (rows, leader first)."""
    kind, _, kernel = path.partition("-")
    if kernel:
        monkeypatch.setattr(striped, "_kernel", NATIVE if kernel == "native" else PURE)
    if placer is None:
        assert random is not None
        placer = StripedReplicaPlacer(random)
    cluster = Cluster(brokers)
    if kind == "columns":
        arr = placer.place_columns(spec, cluster)
        assert arr.dtype == np.int32 and arr.shape == (spec.num_partitions, spec.num_replicas)
        return arr.tolist()
    assignment = placer.place(spec, cluster)
    assert all(pa.directories == (DirectoryId.MIGRATING,) * len(pa.replicas) for pa in assignment.assignments)
    return [list(pa.replicas) for pa in assignment.assignments]


def mock_random(path: str) -> MockRandom:
    return ForcedObjectModel() if path == "object-model" else MockRandom()


# -- StripedReplicaPlacerTest -------------------------------------------------------------

def test_broker_list() -> None:
    # StripedReplicaPlacerTest.testBrokerList
    empty = BrokerList()
    assert empty.size() == 0
    assert empty.next(1) == -1
    brokers = BrokerList().add(0).add(1).add(2).add(3)
    assert brokers.size() == 4
    assert [brokers.next(0) for _ in range(6)] == [0, 1, 2, 3, -1, -1]
    assert [brokers.next(1) for _ in range(5)] == [1, 2, 3, 0, -1]


def test_avoid_fenced_replica_if_possible_on_single_rack() -> None:
    # StripedReplicaPlacerTest.testAvoidFencedReplicaIfPossibleOnSingleRack
    rack_list = RackList(MockRandom(), [B(3, None, False), B(1, None, True), B(0, None, False),
                                        B(4, None, False), B(2, None, False)])
    assert rack_list.num_total_brokers == 5
    assert rack_list.num_unfenced_brokers == 4
    assert rack_list.rack_names == [None]
    with pytest.raises(InvalidReplicationFactorError):
        rack_list.place(0)
    with pytest.raises(InvalidReplicationFactorError):
        rack_list.place(-1)
    assert rack_list.place(4) == [3, 4, 0, 2]
    assert rack_list.place(4) == [4, 0, 2, 3]
    assert rack_list.place(4) == [0, 2, 3, 4]
    assert rack_list.place(4) == [2, 3, 4, 0]
    assert rack_list.place(4) == [0, 4, 3, 2]


@pytest.mark.parametrize("path", PATHS)
def test_multi_partition_topic_placement_on_single_unfenced_broker(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # StripedReplicaPlacerTest.testMultiPartitionTopicPlacementOnSingleUnfencedBroker
    rows = place_rows(path, monkeypatch, mock_random(path), PlacementSpec(0, 3, 1),
                      [B(0, None, False), B(1, None, True)])
    assert rows == [[0], [0], [0]]


def test_placement_on_fenced_replica_on_single_rack() -> None:
    # StripedReplicaPlacerTest.testPlacementOnFencedReplicaOnSingleRack
    rack_list = RackList(MockRandom(), [B(3, None, False), B(1, None, True), B(2, None, False)])
    assert (rack_list.num_total_brokers, rack_list.num_unfenced_brokers) == (3, 2)
    assert rack_list.rack_names == [None]
    assert [rack_list.place(3) for _ in range(4)] == [[3, 2, 1], [2, 3, 1], [3, 2, 1], [2, 3, 1]]


def test_rack_list_with_multiple_racks() -> None:
    # StripedReplicaPlacerTest.testRackListWithMultipleRacks
    rack_list = RackList(MockRandom(), [B(11, "1", False), B(10, "1", False), B(30, "3", False),
                                        B(31, "3", False), B(21, "2", False), B(20, "2", True)])
    assert (rack_list.num_total_brokers, rack_list.num_unfenced_brokers) == (6, 5)
    assert rack_list.rack_names == ["1", "2", "3"]
    assert [rack_list.place(4) for _ in range(3)] == [[11, 21, 31, 10], [21, 30, 10, 20], [31, 11, 21, 30]]


def test_rack_list_with_invalid_racks() -> None:
    # StripedReplicaPlacerTest.testRackListWithInvalidRacks: racks 2 and 3 have only fenced brokers
    rack_list = RackList(MockRandom(), [B(11, "1", False), B(10, "1", False), B(30, "3", True),
                                        B(31, "3", True), B(20, "2", True), B(21, "2", True),
                                        B(41, "4", False), B(40, "4", True)])
    assert (rack_list.num_total_brokers, rack_list.num_unfenced_brokers) == (8, 3)
    assert rack_list.rack_names == ["1", "2", "3", "4"]
    assert [rack_list.place(4) for _ in range(3)] == [[41, 11, 21, 30], [10, 20, 31, 41], [41, 21, 30, 11]]


@pytest.mark.parametrize("path", PATHS)
def test_all_brokers_fenced(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # StripedReplicaPlacerTest.testAllBrokersFenced
    with pytest.raises(InvalidReplicationFactorError) as info:
        place_rows(path, monkeypatch, mock_random(path), PlacementSpec(0, 1, 1), [B(11, "1", True), B(10, "1", True)])
    assert info.value.message == "All brokers are currently fenced."
    assert info.value.error == Errors.INVALID_REPLICATION_FACTOR


@pytest.mark.parametrize("path", PATHS)
def test_not_enough_brokers(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # StripedReplicaPlacerTest.testNotEnoughBrokers
    with pytest.raises(InvalidReplicationFactorError) as info:
        place_rows(path, monkeypatch, mock_random(path), PlacementSpec(0, 1, 3),
                   [B(11, "1", False), B(10, "1", False)])
    assert info.value.message == ("The target replication factor of 3 cannot be reached because only "
                                  "2 broker(s) are registered.")


@pytest.mark.parametrize("path", PATHS)
def test_non_positive_replication_factor(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # StripedReplicaPlacerTest.testNonPositiveReplicationFactor
    with pytest.raises(InvalidReplicationFactorError) as info:
        place_rows(path, monkeypatch, mock_random(path), PlacementSpec(0, 1, 0),
                   [B(11, "1", False), B(10, "1", False)])
    assert info.value.message == "Invalid replication factor 0: the replication factor must be positive."


@pytest.mark.parametrize("path", PATHS)
def test_successful_placement(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # StripedReplicaPlacerTest.testSuccessfulPlacement
    rows = place_rows(path, monkeypatch, mock_random(path), PlacementSpec(0, 5, 3),
                      [B(0, None, False), B(3, None, False), B(2, None, False), B(1, None, False)])
    assert rows == [[2, 3, 0], [3, 0, 1], [0, 1, 2], [1, 2, 3], [1, 0, 2]]


@pytest.mark.parametrize("path", PATHS)
def test_even_distribution(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # StripedReplicaPlacerTest.testEvenDistribution
    rows = place_rows(path, monkeypatch, mock_random(path), PlacementSpec(0, 200, 2),
                      [B(i, None, False) for i in range(4)])
    counts = Counter(tuple(r) for r in rows)
    assert counts == {(0, 1): 14, (0, 2): 22, (0, 3): 14, (1, 0): 17, (1, 2): 17, (1, 3): 16,
                      (2, 0): 13, (2, 1): 17, (2, 3): 20, (3, 0): 20, (3, 1): 19, (3, 2): 11}


def test_rack_list_all_brokers_fenced() -> None:
    # StripedReplicaPlacerTest.testRackListAllBrokersFenced
    rack_list = RackList(MockRandom(), [B(0, None, True), B(1, None, True), B(2, None, True)])
    assert (rack_list.num_total_brokers, rack_list.num_unfenced_brokers) == (3, 0)
    assert rack_list.rack_names == [None]
    with pytest.raises(InvalidReplicationFactorError, match=r"^All brokers are currently fenced\.$"):
        rack_list.place(3)


def test_rack_list_not_enough_brokers() -> None:
    # StripedReplicaPlacerTest.testRackListNotEnoughBrokers
    rack_list = RackList(MockRandom(), [B(11, "1", False), B(10, "1", False)])
    with pytest.raises(InvalidReplicationFactorError) as info:
        rack_list.place(3)
    assert info.value.message == ("The target replication factor of 3 cannot be reached because only "
                                  "2 broker(s) are registered.")


def test_rack_list_non_positive_replication_factor() -> None:
    # StripedReplicaPlacerTest.testRackListNonPositiveReplicationFactor
    rack_list = RackList(MockRandom(), [B(11, "1", False), B(10, "1", False)])
    with pytest.raises(InvalidReplicationFactorError) as info:
        rack_list.place(-1)
    assert info.value.message == "Invalid replication factor -1: the replication factor must be positive."


def test_rack_list_checks_too_few_brokers_before_all_fenced() -> None:
    # RackList.place checks "too few" before "all fenced"; the placer the other way round
    brokers = [B(1, None, True), B(2, None, True)]
    with pytest.raises(InvalidReplicationFactorError, match="cannot be reached"):
        RackList(MockRandom(), brokers).place(3)
    with pytest.raises(InvalidReplicationFactorError, match="All brokers are currently fenced"):
        StripedReplicaPlacer(MockRandom()).place(PlacementSpec(0, 1, 3), Cluster(brokers))


# -- PartitionAssignmentTest / TopicAssignmentTest ----------------------------------------

def test_partition_assignment_replicas() -> None:
    # PartitionAssignmentTest.testPartitionAssignmentReplicas
    assert partition_assignment([0, 1, 2]).replicas == (0, 1, 2)


def test_partition_assignment_consistent_equals_and_hash() -> None:
    # PartitionAssignmentTest.testConsistentEqualsAndHashCode
    assignments = [partition_assignment([0, 1, 2]), partition_assignment([1, 2, 0])]
    for i, a in enumerate(assignments):
        for j, b in enumerate(assignments):
            if i == j:
                assert a == b
                assert a == partition_assignment(list(a.replicas))
                assert hash(a) == hash(b)
            else:
                assert a != b
                assert hash(a) != hash(b)


def test_partition_assignment_to_string() -> None:
    # PartitionAssignmentTest.testToString
    dirs = [Uuid.from_string("65WMNfybQpCDVulYOxMCTw"), Uuid.from_string("VkZ5AkuESPGkMc2OxpKUjw"),
            Uuid.from_string("wFtTi4FxTlOhhHytfxv7fQ")]
    assignment = PartitionAssignment.of([0, 1, 2], lambda i: dirs[i])
    assert str(assignment) == ("PartitionAssignment(replicas=[0, 1, 2], "
                               "directories=[65WMNfybQpCDVulYOxMCTw, VkZ5AkuESPGkMc2OxpKUjw, wFtTi4FxTlOhhHytfxv7fQ])")


def test_partition_assignment_needs_a_directory_per_replica() -> None:
    with pytest.raises(ValueError, match="one directory per replica, got 2 replicas and 1 directories"):
        PartitionAssignment((1, 2), (DirectoryId.MIGRATING,))


def test_topic_assignment_replicas() -> None:
    # TopicAssignmentTest.testTopicAssignmentReplicas
    assignments = [partition_assignment([0, 1, 2]), partition_assignment([1, 2, 0])]
    assert list(TopicAssignment(assignments).assignments) == assignments


def test_topic_assignment_consistent_equals_and_hash() -> None:
    # TopicAssignmentTest.testConsistentEqualsAndHashCode
    topics = [TopicAssignment([partition_assignment([0, 1, 2])]), TopicAssignment([partition_assignment([1, 2, 0])])]
    for i, a in enumerate(topics):
        for j, b in enumerate(topics):
            if i == j:
                assert a == b
                assert a == TopicAssignment(a.assignments)
                assert hash(a) == hash(b)
            else:
                assert a != b
                assert hash(a) != hash(b)


def test_topic_assignment_to_string() -> None:
    # TopicAssignmentTest.testToString
    dirs = [Uuid.from_string("v56qeYzNRrqNtXsxzcReog"), Uuid.from_string("MvUIAsOiRlSePeiBHdZrSQ"),
            Uuid.from_string("jUqCchHtTHqMxeVv4dw1RA")]
    topic = TopicAssignment([PartitionAssignment.of([0, 1, 2], lambda i: dirs[i])])
    assert str(topic) == ("TopicAssignment(assignments=[PartitionAssignment(replicas=[0, 1, 2], "
                          "directories=[v56qeYzNRrqNtXsxzcReog, MvUIAsOiRlSePeiBHdZrSQ, jUqCchHtTHqMxeVv4dw1RA])])")


def test_placement_spec_to_string() -> None:
    assert str(PlacementSpec(1, 2, 3)) == "PlacementSpec(startPartition=1, numPartitions=2, numReplicas=3)"


def test_place_takes_directories_from_the_describer() -> None:
    directory = Uuid.from_string("65WMNfybQpCDVulYOxMCTw")
    topic = StripedReplicaPlacer(MockRandom()).place(PlacementSpec(0, 2, 2), Cluster(
        [B(0, None, False), B(1, None, False)], directory))
    assert [pa.directories for pa in topic.assignments] == [(directory, directory)] * 2


def test_usable_broker_is_shared_with_heartbeats() -> None:
    assert heartbeats.UsableBroker is UsableBroker


# -- java.util.Random, Collections.shuffle, String, HashMap -------------------------------

def test_java_random_next_int() -> None:
    # new Random(42).nextInt() x4, new Random(0).nextInt(): the well-known values (OpenJDK 17 agrees)
    r = JavaRandom(42)
    assert [r.next_int() for _ in range(4)] == [-1170105035, 234785527, -1360544799, 205897768]
    assert JavaRandom(0).next_int() == -1155484576


def test_java_random_next_int_bound() -> None:
    # new Random(42).nextInt(10) x10 (OpenJDK 17)
    r = JavaRandom(42)
    assert [r.next_int(10) for _ in range(10)] == [0, 3, 8, 4, 0, 5, 5, 8, 9, 3]
    # bound 2**30 + 1: about half of the draws are rejected (u - u % bound + bound - 1 overflows)
    r = JavaRandom(42)
    assert [r.next_int((1 << 30) + 1) for _ in range(8)] == [117392763, 102948884, 662969970, 595021505,
                                                              196118093, 969067502, 791955276, 819572292]
    # negative seeds (Java longs): new Random(-1).nextInt(5) x3
    r = JavaRandom(-1)
    assert [r.next_int(5) for _ in range(3)] == [3, 0, 4]


def test_java_random_other_draws() -> None:
    # nextLong, nextBoolean, nextDouble, nextInt, nextInt(2**30), nextInt(2**30 + 1) in a row (OpenJDK 17)
    expected = {
        (JavaRandom, 42): (-5025562857975149833, True, 0.047939305137387644, -248792245, 297510752, 196118093),
        (MockRandom, 17): (-6670361774329079778, False, 0.9015553772981041, -787303135, 225507316, 272681878),
        (JavaRandom, 0): (-4962768465676381896, False, 0.6063452159973596, 1327362106, 591027245, 251269761),
    }
    for (cls, seed), values in expected.items():
        r = cls(seed)
        assert (r.next_long(), r.next_boolean(), r.next_double(), r.next_int(), r.next_int(1 << 30),
                r.next_int((1 << 30) + 1)) == values


def test_mock_random() -> None:
    # Kafka's MockRandom (state 17): nextInt() x4 and nextInt(bound) (OpenJDK 17)
    r = MockRandom()
    assert [r.next_int() for _ in range(4)] == [-1553064625, -1379575778, 649309754, -422816401]
    r = MockRandom()
    bounds = [10, 10, 10, 10, 10, 7, 1, 2, 3, (1 << 30) + 1, (1 << 30) + 1, (1 << 30) + 1, (1 << 30) + 1]
    assert [r.next_int(b) for b in bounds] == [5, 9, 7, 7, 0, 0, 0, 1, 1, 781899194, 528858883, 779386366, 82848634]
    r = MockRandom(-5)  # a negative long state: its two's complement
    assert [r.next_int(5) for _ in range(3)] == [2, 3, 0]


def test_next_int_rejects_bad_bounds() -> None:
    with pytest.raises(ValueError, match="bound must be positive, got 0"):
        JavaRandom(1).next_int(0)
    with pytest.raises(ValueError, match="does not fit a Java int"):
        JavaRandom(1).next_int(1 << 31)


def test_is_lcg() -> None:
    assert JavaRandom.is_lcg() and MockRandom.is_lcg()
    assert not ForcedObjectModel.is_lcg()


def test_java_shuffle() -> None:
    # Collections.shuffle(0..9, new Random(42)) and (.., new MockRandom()) (OpenJDK 17)
    items = list(range(10))
    java_shuffle(items, JavaRandom(42))
    assert items == [4, 6, 2, 1, 7, 9, 8, 5, 3, 0]
    items = list(range(10))
    java_shuffle(items, MockRandom())
    assert items == [7, 2, 3, 8, 6, 0, 9, 1, 4, 5]


def test_java_string_hash() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE, a known one
    # beyond the BMP: the two UTF-16 surrogates count ("\U0001F600" = \ud83d\ude00)
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00


def test_string_order_is_by_utf16_unit() -> None:
    # U+FF61 sorts after U+1F600 by code point but before it by UTF-16 unit (0xD83D < 0xFF61)
    assert sorted_optional_strings(["\uff61", "\U0001F600", None, "a"]) == [None, "a", "\U0001F600", "\uff61"]
    assert java_string_compare_key("ab") < java_string_compare_key("abc")


def test_hash_map_order() -> None:
    # HashMap<Optional<String>, _> iteration orders printed by OpenJDK 17
    assert hash_map_order(["b", "a"]) == (1, 0)
    assert hash_map_order([None, "x", "y", "z"]) == (0, 1, 2, 3)
    assert hash_map_order(["rack1", "rack2", "rack3"]) == (2, 0, 1)
    # 14 keys: the table grew to 32 buckets after the 13th
    assert hash_map_order([f"rack-{j:02d}" for j in range(14)]) == (10, 0, 11, 1, 12, 2, 13, 3, 4, 5, 6, 7, 8, 9)
    # 12 keys in one bucket (equal low 6 bits of the spread hash): two resizes instead of a tree
    # at 16 and 32 buckets, then a red-black tree whose root leads the bucket's iteration
    assert hash_map_order(COLLIDING_RACKS) == (1, 0, 2, 3, 4, 5, 6, 7, 8, 11, 9, 10)


def test_hash_map_order_needs_distinct_keys() -> None:
    with pytest.raises(ValueError, match="distinct keys"):
        hash_map_order(["a", "a"])


#: rack names whose spread String hashes share their low 6 bits (found by search)
COLLIDING_RACKS = ["rack-0", "rack-1b", "rack-3d", "rack-5f", "rack-b3", "rack-d5", "rack-f7", "rack-112",
                   "rack-134", "rack-156", "rack-178", "rack-1ab"]


# -- placements of Kafka's own placer (OpenJDK 17), beyond its tests -----------------------

def _rows(text: str) -> list[list[list[int]]]:
    """Parse the Java harness's output: topics split by '|', partitions by ';', replicas by ','."""
    return [[[int(x) for x in part.split(",") if x] for part in topic.split(";") if part]
            for topic in text.split("|") if topic]


#: name -> (random, seed, topics placed in a row, RF, partitions, brokers, Java's replicas, Java's
#: random.nextInt() after them)
JAVA_PLACEMENTS = {
    # 3 racks, broker 4 fenced; 12 partitions > 8 unfenced: a shuffle mid-topic
    "three-racks": (MockRandom, 17, 2, 3, 12, [B(i, "abc"[i % 3], i == 4) for i in range(9)],
                    "3,1,5,;7,8,6,;2,0,1,;3,7,5,;1,8,6,;2,0,7,;3,1,5,;7,8,6,;1,2,3,;5,6,7,;0,1,8,;7,2,3,;|"
                    "5,6,1,;0,7,8,;1,2,3,;5,6,7,;0,1,8,;7,2,3,;5,6,1,;0,7,8,;0,5,1,;8,7,6,;1,3,2,;0,5,7,;|",
                    -528193980),
    # java.util.Random, a rack-less broker, a fenced-only rack, RF 4
    "uneven-racks": (JavaRandom, 12345, 1, 4, 10,
                     [B(1, None, False), B(2, "r1", False), B(3, "r1", True), B(4, "r2", False),
                      B(5, "r2", False), B(6, "r3", True)],
                     "1,2,5,6,;2,4,6,1,;5,6,1,2,;1,6,2,4,;4,6,1,2,;5,1,2,6,;1,2,6,4,;2,6,5,1,;2,1,6,4,;"
                     "1,6,5,2,;|", -1554121271),
    # 14 racks: their initial offsets are drawn in the order of a 32-bucket HashMap
    "fourteen-racks": (MockRandom, 17, 1, 3, 30,
                       [B(100 + j, f"rack-{j % 14:02d}", j in (3, 17)) for j in range(28)],
                       "124,111,112,;125,126,127,;112,113,100,;127,114,101,;100,115,102,;101,116,103,;"
                       "102,117,118,;104,103,105,;118,119,106,;105,120,107,;106,121,122,;107,108,123,;"
                       "122,109,110,;123,124,111,;110,125,126,;111,112,113,;126,127,114,;113,100,115,;"
                       "114,101,116,;115,102,117,;116,103,104,;118,117,119,;104,105,120,;119,106,121,;"
                       "120,107,108,;121,122,109,;123,117,112,;126,103,127,;112,113,118,;127,104,122,;|",
                       912236158),
    # racks in one HashMap tree bucket
    "tree-bucket-racks": (MockRandom, 17, 1, 3, 26,
                          [B(j, COLLIDING_RACKS[j % 12], j % 5 == 0) for j in range(30)],
                          "9,22,11,;22,23,1,;11,13,14,;1,26,27,;2,3,16,;27,28,17,;4,29,6,;17,18,12,;6,24,7,;"
                          "12,19,8,;7,8,21,;8,9,22,;21,22,23,;22,11,13,;23,1,14,;13,26,3,;2,27,16,;3,28,29,;"
                          "4,17,18,;29,6,24,;18,12,19,;24,7,8,;19,8,9,;8,21,22,;26,22,19,;22,7,16,;|",
                          912236158),
    # two topics of RF 3 on 3 brokers (one fenced, so last)
    "fenced-last": (MockRandom, 17, 2, 3, 2, [B(0, "a", False), B(1, "b", True), B(2, "b", False)],
                    "2,0,1,;0,2,1,;|2,0,1,;0,2,1,;|", 545363757),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", list(JAVA_PLACEMENTS))
def test_kafka_placements(case: str, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cls, seed, topics, rf, partitions, brokers, text, next_int = JAVA_PLACEMENTS[case]
    random = cls(seed)
    if path == "object-model":
        random = type("Forced", (cls,), {"next": lambda self, bits: cls.next(self, bits)})(seed)
    placer = StripedReplicaPlacer(random)
    got = [place_rows(path, monkeypatch, None, PlacementSpec(0, partitions, rf), brokers, placer)
           for _ in range(topics)]
    assert got == _rows(text)
    assert random.next_int() == next_int  # the random advanced exactly as Java's


#: (RF, brokers, Java's message, Java's MockRandom().nextInt() after the failed place: the rack
#: list was built, and its draws made, before the checks)
JAVA_ERRORS = [
    (0, [B(0, None, True), B(1, "a", True)], "Invalid replication factor 0: the replication factor must be positive.",
     -422816401),
    (3, [B(0, "a", False), B(1, "b", True)],
     "The target replication factor of 3 cannot be reached because only 2 broker(s) are registered.", -422816401),
    (1, [], "All brokers are currently fenced.", -1553064625),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("rf,brokers,message,next_int", JAVA_ERRORS)
def test_errors_after_the_rack_list_draws(rf: int, brokers: list[UsableBroker], message: str, next_int: int,
                                          path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    random = mock_random(path)
    with pytest.raises(InvalidReplicationFactorError) as info:
        place_rows(path, monkeypatch, random, PlacementSpec(0, 5, rf), brokers)
    assert info.value.message == message
    assert random.next_int() == next_int


@pytest.mark.parametrize("path", PATHS)
def test_zero_partitions_still_draws(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Java: PLACE mock 17, RF 2, 0 partitions on a:0, b:1 (fenced), b:2 -> nothing, then nextInt() 874314300
    random = mock_random(path)
    assert place_rows(path, monkeypatch, random, PlacementSpec(0, 0, 2),
                      [B(0, "a", False), B(1, "b", True), B(2, "b", False)]) == []
    assert random.next_int() == 874314300


def test_negative_partition_count_is_refused() -> None:
    with pytest.raises(ValueError, match="num_partitions must not be negative, got -1"):
        StripedReplicaPlacer(MockRandom()).place_columns(PlacementSpec(0, -1, 1), Cluster([B(0, None, False)]))


# -- where Kafka's loop never ends --------------------------------------------------------

def _stale_fenced_list() -> RackList:
    """A rack list whose fenced list was exhausted in epoch 0 and not used again until the epoch
    restarted at 0: Kafka's RackList.place(3) then spins for ever (checked on OpenJDK 17: the
    third call never returns)."""
    rack_list = RackList(MockRandom(), [B(0, None, False), B(1, None, False), B(2, None, True)])
    assert rack_list.place(3) == [1, 0, 2]
    assert rack_list.place(2) == [0, 1]
    return rack_list


def test_a_placement_that_cannot_progress_raises() -> None:
    with pytest.raises(PlacementError, match="no rack has a broker left for replica 2 in iteration epoch 0"):
        _stale_fenced_list().place(3)


@pytest.mark.parametrize("kernel", [NATIVE, PURE], ids=["native", "pure"])
def test_the_kernels_raise_where_kafka_spins(kernel: ModuleType) -> None:
    flat = striped._flatten(_stale_fenced_list())
    rng = np.array([17, MockRandom.MULTIPLIER, MockRandom.ADDEND, 64], dtype=np.uint64)
    out = np.zeros((1, 3), dtype=np.int32)
    with pytest.raises(RuntimeError, match="no rack has a broker left for replica 2 in iteration epoch 0"):
        kernel.place_partitions(out, flat.brokers, flat.starts, flat.cursors, flat.rack_names, flat.map_order,
                                flat.rack_state, rng)


@pytest.mark.parametrize("kernel", [NATIVE, PURE], ids=["native", "pure"])
def test_the_kernels_check_their_arrays(kernel: ModuleType) -> None:
    flat = striped._flatten(RackList(MockRandom(), [B(0, "a", False), B(1, "b", False)]))
    rng = np.array([17, MockRandom.MULTIPLIER, MockRandom.ADDEND, 64], dtype=np.uint64)
    out = np.zeros((1, 2), dtype=np.int32)
    args = [flat.brokers, flat.starts, flat.cursors, flat.rack_names, flat.map_order, flat.rack_state, rng]
    bad_starts = flat.starts.copy()
    bad_starts[-1] = 7
    with pytest.raises(ValueError, match="list starts must run from 0 to 2"):
        kernel.place_partitions(out, *args[:1], bad_starts, *args[2:])
    with pytest.raises(ValueError, match="placement state sizes disagree"):
        kernel.place_partitions(out, *args[:2], flat.cursors[:-1].copy(), *args[3:])
    bad_names = flat.rack_names.copy()
    bad_names[0] = 5
    with pytest.raises(ValueError, match="rack id out of range at 0"):
        kernel.place_partitions(out, *args[:3], bad_names, *args[4:])
    bad_rng = rng.copy()
    bad_rng[3] = 16
    with pytest.raises(ValueError, match="LCG width must be 31..64 bits, got 16"):
        kernel.place_partitions(out, *args[:6], bad_rng)
    kernel.place_partitions(out, *args)  # the good arrays place
    assert sorted(out[0].tolist()) == [0, 1]


# -- properties -----------------------------------------------------------------------------

RACKS = [None, "a", "b", "rack1", "rack2", "Aa", "BB", "z"]  # "Aa" and "BB": equal String hashes


@st.composite
def clusters(draw: st.DrawFn) -> list[UsableBroker]:
    ids = draw(st.lists(st.integers(0, 500), min_size=0, max_size=16, unique=True))
    racks = draw(st.lists(st.sampled_from(RACKS), min_size=1, max_size=5))
    return [UsableBroker(i, draw(st.sampled_from(racks)), draw(st.booleans())) for i in ids]


randoms = st.one_of(st.builds(MockRandom, st.integers(-(1 << 63), (1 << 63) - 1)),
                    st.builds(JavaRandom, st.integers(-(1 << 63), (1 << 63) - 1)))


def _reference(random: JavaRandom, spec: PlacementSpec, brokers: list[UsableBroker]) -> list[list[int]] | str:
    """The object model's answer: the rack list, the placer's checks in Kafka's order, then
    RackList.place row by row."""
    rack_list = RackList(random, brokers)
    if spec.num_replicas <= 0:
        return f"error: Invalid replication factor {spec.num_replicas}: the replication factor must be positive."
    if rack_list.num_unfenced_brokers == 0:
        return "error: All brokers are currently fenced."
    if spec.num_replicas > rack_list.num_total_brokers:
        return (f"error: The target replication factor of {spec.num_replicas} cannot be reached because only "
                f"{rack_list.num_total_brokers} broker(s) are registered.")
    return [rack_list.place(spec.num_replicas) for _ in range(spec.num_partitions)]


def _columns(kernel: ModuleType, random: JavaRandom, spec: PlacementSpec, brokers: list[UsableBroker]
             ) -> list[list[int]] | str:
    saved = striped._kernel
    striped._kernel = kernel
    try:
        return StripedReplicaPlacer(random).place_columns(spec, Cluster(brokers)).tolist()
    except InvalidReplicationFactorError as exc:
        return f"error: {exc.message}"
    finally:
        striped._kernel = saved


def _copy(random: JavaRandom) -> JavaRandom:
    twin = type(random).__new__(type(random))
    twin.state = random.state
    return twin


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(-1, 5), st.integers(0, 60), randoms, st.integers(1, 3))
def test_kernels_match_the_object_model(brokers: list[UsableBroker], rf: int, partitions: int,
                                        random: JavaRandom, topics: int) -> None:
    spec = PlacementSpec(0, partitions, rf)
    ref_random, native_random, pure_random = _copy(random), _copy(random), _copy(random)
    for _ in range(topics):
        expected = _reference(ref_random, spec, brokers)
        assert _columns(NATIVE, native_random, spec, brokers) == expected
        assert _columns(PURE, pure_random, spec, brokers) == expected
        assert native_random.state == pure_random.state == ref_random.state


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 5), st.integers(1, 60), randoms)
def test_placement_invariants(brokers: list[UsableBroker], rf: int, partitions: int, random: JavaRandom) -> None:
    unfenced = {b.id for b in brokers if not b.fenced}
    if not unfenced or rf > len(brokers):
        return  # the error cases are the test above's
    rows = StripedReplicaPlacer(random).place_columns(PlacementSpec(0, partitions, rf), Cluster(brokers)).tolist()
    ids = {b.id for b in brokers}
    for row in rows:
        assert len(row) == rf
        assert len(set(row)) == rf  # distinct
        assert set(row) <= ids
        assert row[0] in unfenced  # the leader is never fenced
    per_rack: dict[str | None, int] = Counter(b.rack for b in brokers if not b.fenced)
    if all(per_rack.get(b.rack, 0) >= rf for b in brokers):
        # every rack can fill a partition from unfenced brokers: no fenced broker is placed
        assert all(set(row) <= unfenced for row in rows)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=2, max_size=16, unique=True), st.integers(1, 3), randoms)
def test_single_rack_leaders_rotate(ids: list[int], rf: int, random: JavaRandom) -> None:
    # one rack, all unfenced: the first len(ids) partitions (one iteration cycle) have distinct leaders
    brokers = [UsableBroker(i, None, False) for i in ids]
    rf = min(rf, len(ids))
    rows = StripedReplicaPlacer(random).place_columns(PlacementSpec(0, len(ids), rf), Cluster(brokers)).tolist()
    assert sorted(row[0] for row in rows) == sorted(ids)


@settings(max_examples=100, deadline=None)
@given(clusters(), st.integers(1, 4), st.integers(0, 30), randoms)
def test_place_matches_place_columns(brokers: list[UsableBroker], rf: int, partitions: int,
                                     random: JavaRandom) -> None:
    if not any(not b.fenced for b in brokers) or rf > len(brokers):
        return
    spec = PlacementSpec(0, partitions, rf)
    twin = _copy(random)
    topic = StripedReplicaPlacer(random).place(spec, Cluster(brokers))
    columns = StripedReplicaPlacer(twin).place_columns(spec, Cluster(brokers))
    assert [list(pa.replicas) for pa in topic.assignments] == columns.tolist()
    assert random.state == twin.state


def _state_drawing(first_draw: int, cls: type[JavaRandom] = MockRandom) -> int:
    """A state whose next ``next(31)`` is ``first_draw`` (the LCG stepped back once)."""
    after = (first_draw << (cls.WIDTH - 31)) | 12345
    return ((after - cls.ADDEND) * pow(cls.MULTIPLIER, -1, 1 << cls.WIDTH)) % (1 << cls.WIDTH)


@pytest.mark.parametrize("kernel", [NATIVE, PURE], ids=["native", "pure"])
def test_kernel_shuffle_rejects_like_java(kernel: ModuleType) -> None:
    # nextInt(3) rejects u = 2**31 - 1 (u - u % 3 + 2 overflows an int) and draws again; make the
    # kernel's first draw (the shuffle of a 3-broker list at the end of an iteration cycle) be it
    rejected = _state_drawing((1 << 31) - 1)
    probe = MockRandom()
    probe.state = rejected
    single_step = MockRandom()
    single_step.state = rejected
    single_step.next(31)
    probe.next_int(3)
    assert probe.state != single_step.state  # two draws: the first was rejected
    brokers = [B(0, None, False), B(1, None, False), B(2, None, False)]
    reference = RackList(MockRandom(), brokers)
    flat = striped._flatten(reference)
    reference.epoch = 3  # == the unfenced count: the next placement shuffles first
    reference.random.state = rejected
    expected = [reference.place(3) for _ in range(4)]
    rack_state = flat.rack_state.copy()
    rack_state[0] = 3
    rng = np.array([rejected, MockRandom.MULTIPLIER, MockRandom.ADDEND, 64], dtype=np.uint64)
    out = np.zeros((4, 3), dtype=np.int32)
    kernel.place_partitions(out, flat.brokers, flat.starts, flat.cursors, flat.rack_names, flat.map_order,
                            rack_state, rng)
    assert out.tolist() == expected
    assert int(rng[0]) == reference.random.state


@pytest.mark.parametrize("path", ["place-native", "place-pure", "object-model"])
def test_place_gives_each_replica_its_brokers_directory(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # PartitionAssignment(replicas, cluster): directories[i] = cluster.defaultDir(replicas[i])
    dirs = {b: Uuid.from_string(s) for b, s in enumerate(["65WMNfybQpCDVulYOxMCTw", "VkZ5AkuESPGkMc2OxpKUjw",
                                                          "wFtTi4FxTlOhhHytfxv7fQ"])}

    class PerBroker(Cluster):
        def default_dir(self, broker_id: int) -> Uuid:
            return dirs[broker_id]

    kind, _, kernel = path.partition("-")
    if kernel:
        monkeypatch.setattr(striped, "_kernel", NATIVE if kernel == "native" else PURE)
    random = ForcedObjectModel() if path == "object-model" else MockRandom()
    topic = StripedReplicaPlacer(random).place(PlacementSpec(0, 5, 2), PerBroker([B(i, None, False) for i in range(3)]))
    assert len(topic.assignments) == 5
    for pa in topic.assignments:
        assert pa.directories == tuple(dirs[r] for r in pa.replicas)
