"""The client APIs a broker answers from its metadata image (Kafka's ``KafkaApis`` read paths).

Served on a broker listener (``BrokerApis.handlers()`` is a ``KafkaServer`` handler table):

* ApiVersions v0-4 -- only the keys this listener has handlers for (plus ApiVersions), the
  software's supported features and the image's finalized features with their epoch (the
  image's offset);
* Metadata v0-13 (KafkaApis.handleTopicMetadataRequest over KRaftMetadataCache);
* DescribeCluster v0-2 as a BROKER endpoint;
* DescribeConfigs v1-4 for TOPIC and BROKER resources (:mod:`.describe_configs`);
* DescribeTopicPartitions v0 (KIP-966, paginated);
* Produce, Fetch, ListOffsets and FindCoordinator when given ``partition_handlers``
  (:mod:`.partition_apis`, over the ReplicaManager).

Each handler reads ``cache.image()`` ONCE and answers from that image only.

Authorized operations: no authorizer is configured on a kraft broker, so Kafka's
``authorizedOperations`` is every operation the resource type supports: topic 3576
(READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS), cluster 8096
(CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE).
When not asked for, the field is Integer.MIN_VALUE (the schema default), as Kafka sends;
kafka-python decodes the bitfield and fails on a placeholder.

Auto-creation (``auto.create.topics.enable``): Kafka's default is ``true``, and so is ours,
but creation goes through the injected ``auto_create(names)`` hook (the forwarding side sends
CreateTopics to the controller).  Without a hook (``auto_create=None``) auto-creation is OFF
whatever the config says -- a broker that cannot reach the controller must not pretend -- and
a warning names the setting once at construction when it is on.  While a requested topic is
being created it is answered LEADER_NOT_AVAILABLE, as Kafka's AutoTopicCreationManager does.

Performance of Metadata "all topics" (issue 24's target: 5,000 topics x 10 partitions in
<= 5 ms warm, <= 10 ms on the first request after a new image): the generated encoder costs
microseconds per partition, so partitions are encoded from columns by the ``_metadata_encode``
kernel (:mod:`.metadata_encoding`): a block's rows all at once, and a topic with overrides (or
no block) gathered with the other changed topics into one :class:`TopicRows`.  Per answer shape
``(version, listener, topic authorized operations asked)`` and ClusterImage (broker liveness,
listeners, directories: the inputs of the partition errors and offline replicas) the last
all-topics answer is kept as an :class:`_Answer`: the response frame that carried it, each
topic's byte offsets, and where each topic's partitions came from (block, rows, prefix length)
as numpy arrays.  The next answer is made from it with no Python step per kept topic:

* the same image: the kept bytes, spliced behind a new head (one copy);
* a new image, the same cluster: the kept topics' bytes copied whole; the new or changed ones
  (found by identity, in place) encoded together;
* a new cluster (a broker fenced): every kept topic is its old prefix, its block's rows encoded
  again for the new cluster (one kernel call a block), and its old suffix -- offsets by numpy,
  bytes by one ``join_slices`` call straight into the response frame.

A named-topic request's topics are cached per shape by TopicImage identity (``by_id``).  The
frame head (brokers, cluster id, controller id) is encoded by the generated code with an empty
topics array and split around it (:func:`splice_metadata_topics`); the bytes go to the
connection as they are.
"""
from __future__ import annotations

import logging
import operator
import struct
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt

from kraft_node.broker.describe_configs import describe_configs
from kraft_node.broker.metadata_cache import (
    NO_LEADER_ID,
    KRaftMetadataCache,
    PartitionView,
    is_internal_topic,
    partition_view,
)
from kraft_node.broker.metadata_encoding import (
    BrokerTable,
    Rows,
    TopicRows,
    encode_block_partitions,
    join_slices,
    topic_prefix,
    topic_rows,
    topic_suffix,
    topics_rows,
)
from kraft_node.metadata.controller.replication_control import PartitionRegistration
from kraft_node.metadata.controller.topic_creation import topic_name_error
from kraft_node.metadata.image.cluster import ClusterImage
from kraft_node.metadata.image.metadata_image import MetadataImage
from kraft_node.metadata.image.topics import TopicImage, TopicPartitions, TopicsImage
from kraft_node.network.server import DEFERRED, RequestContext
from kraft_node.protocol.api_keys import ApiKeys, answer_api_versions
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.framing import encode_response
from kraft_node.protocol.generated.describe_cluster import DescribeClusterResponse
from kraft_node.protocol.generated.describe_topic_partitions import DescribeTopicPartitionsResponse
from kraft_node.protocol.generated.metadata import MetadataResponse
from kraft_storage.messages.runtime import ZERO_UUID, Uuid, Writer, uvarint_bytes

__all__ = ["BrokerApis", "Handler", "TOPIC_AUTHORIZED_OPERATIONS", "CLUSTER_AUTHORIZED_OPERATIONS",
           "AUTHORIZED_OPERATIONS_OMITTED", "splice_metadata_topics", "MAX_REQUEST_PARTITION_SIZE_LIMIT"]

log = logging.getLogger(__name__)

Handler = Callable[[RequestContext, Any], Any]

#: Every TOPIC operation (no authorizer): bits READ(3) WRITE(4) CREATE(5) DELETE(6) ALTER(7) DESCRIBE(8)
#: DESCRIBE_CONFIGS(10) ALTER_CONFIGS(11).
TOPIC_AUTHORIZED_OPERATIONS = 3576
#: Every CLUSTER operation (no authorizer): CREATE(5) ALTER(7) DESCRIBE(8) CLUSTER_ACTION(9)
#: DESCRIBE_CONFIGS(10) ALTER_CONFIGS(11) IDEMPOTENT_WRITE(12).
CLUSTER_AUTHORIZED_OPERATIONS = 8096
#: The schema default: "not requested".
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
#: Kafka's ``max.request.partition.size.limit`` default: DescribeTopicPartitions' page cap.
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000

_BROKER_ENDPOINT = 1
_ENDPOINT_TYPES = {1: "BROKER", 2: "CONTROLLER"}
_I32 = struct.Struct(">i")

_MR: Any = MetadataResponse
#: the API keys by name (ApiKeys is built at run time: mypy cannot see its members)
_KEYS: Any = ApiKeys


def _bool_config(props: Mapping[str, str], key: str, default: bool) -> bool:
    raw = props.get(key)
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{key}: expected true or false, got {raw!r}")
    return text == "true"


def _int_config(props: Mapping[str, str], key: str, default: int) -> int:
    raw = props.get(key)
    if raw is None:
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"{key}: expected an integer, got {raw!r}") from None


# ---------------------------------------------------------------------------------------------
# Metadata: encoded topics, spliced into a frame
# ---------------------------------------------------------------------------------------------

def _metadata_tail_size(version: int) -> int:
    """Bytes after the topics array in a MetadataResponse body: cluster authorized operations
    (v8-10, int32), error code (v13+, int16), tagged fields (v9+, one 0 byte when none)."""
    return (4 if 8 <= version <= 10 else 0) + (2 if version >= 13 else 0) + (1 if version >= 9 else 0)


def _array_prefix(count: int, version: int) -> bytes:
    """The topics array's length: int32 before v9, unsigned varint of count + 1 (compact) after."""
    return uvarint_bytes(count + 1) if version >= 9 else _I32.pack(count)


def _splice_ends(frame: bytes | bytearray, version: int, count: int, topics_size: int) -> tuple[bytes, bytes]:
    """(what goes before the topics' bytes, what goes after) in :func:`splice_metadata_topics`'s
    frame when the topics take ``topics_size`` bytes."""
    tail = _metadata_tail_size(version)
    empty = 1 if version >= 9 else 4
    cut = len(frame) - tail - empty
    prefix = _array_prefix(count, version)
    size = len(frame) - 4 - empty + len(prefix) + topics_size
    return b"".join((_I32.pack(size), frame[4:cut], prefix)), bytes(frame[len(frame) - tail:])


def splice_metadata_topics(frame: bytes | bytearray, version: int, count: int, topics: Sequence[bytes]) -> bytes:
    """A framed MetadataResponse whose topics array was encoded empty, with ``count`` topics
    whose encodings are ``topics`` (concatenated) put in its place and the size prefix fixed.

    Layout: ``int32 size | header | head fields | topics array | tail`` where the empty array
    is 4 bytes (int32 0) before v9 and 1 byte (varint 1) after, and the tail is
    :func:`_metadata_tail_size` bytes."""
    tail = _metadata_tail_size(version)
    empty = 1 if version >= 9 else 4
    cut = len(frame) - tail - empty
    prefix = _array_prefix(count, version)
    size = len(frame) - 4 - empty + len(prefix) + sum(map(len, topics))
    # one join: the topics' bytes are copied once (a 2 MB answer at 5,000 topics)
    return b"".join((_I32.pack(size), bytes(frame[4:cut]), prefix, *topics, bytes(frame[len(frame) - tail:])))


def _encode_topic(topic: Any, version: int) -> bytes:
    w = Writer()
    topic._write(w, version)
    return bytes(w.out)


class _Answer:
    """One all-topics answer's topics array (for one shape): topic ``i`` (``objects[i]``, in
    ``TopicsImage.topics_by_id`` order) is ``data[offsets[i]:offsets[i + 1]]`` -- ``data`` is the
    frame of the request that made the answer (the topics are copied once, into it).

    Where topic ``i`` is a block slice (``block_of[i] >= 0``) its bytes are, in order, its prefix
    (the first ``prefix_len[i]`` bytes: name, id, count -- they do not depend on the cluster),
    the encoding of rows ``row_start[i] .. row_stop[i]`` of ``blocks[block_of[i]]`` under the
    shape's cluster, and the shape's suffix.  Why arrays: after a cluster change (a broker fenced)
    the next answer is made from them and the blocks' new rows with numpy index arithmetic and one
    ``join_slices`` copy -- no Python step per topic (issue 24: <= 10 ms at 5,000 topics).  The
    answer holds ``objects``, so the ids in :meth:`positions` cannot be reused while it lives."""

    __slots__ = ("topics", "objects", "data", "offsets", "blocks", "block_of", "row_start", "row_stop",
                 "prefix_len", "_positions")

    def __init__(self, topics: TopicsImage, objects: list[TopicImage], data: bytes, offsets: npt.NDArray[np.int64],
                 blocks: list[Rows], block_of: npt.NDArray[np.int32], row_start: npt.NDArray[np.int64],
                 row_stop: npt.NDArray[np.int64], prefix_len: npt.NDArray[np.int64],
                 positions: dict[int, int] | None = None) -> None:
        self.topics, self.objects, self.data, self.offsets = topics, objects, data, offsets
        self.blocks, self.block_of, self.row_start, self.row_stop = blocks, block_of, row_start, row_stop
        self.prefix_len = prefix_len
        self._positions = positions

    def positions(self) -> dict[int, int]:
        """id(topic) -> its index (made on first use; shared by the answers over the same objects)."""
        if self._positions is None:
            self._positions = dict(zip(map(id, self.objects), range(len(self.objects))))
        return self._positions


class _TopicBytes:
    """Encoded topics of one answer shape, valid for one ClusterImage (see the module doc).
    ``by_id``: id(TopicImage) -> (that TopicImage, its bytes) for named-topic requests -- the
    entry holds the object, so its id cannot be reused while the entry lives; ``blocks``:
    id(block) -> (block, its rows encoded, row offsets), likewise; ``answer``: the last
    all-topics answer under this cluster."""

    __slots__ = ("cluster", "by_id", "answer", "blocks", "table", "prefixes", "previous")

    def __init__(self, cluster: ClusterImage, listener: str,
                 prefixes: dict[str, tuple[Uuid, int, bytes]] | None = None,
                 previous: _Answer | None = None) -> None:
        self.cluster = cluster
        self.table = BrokerTable.of(cluster, listener)
        self.by_id: dict[int, tuple[TopicImage, bytes]] = {}
        self.blocks: dict[int, tuple[Rows, bytes, npt.NDArray[np.int64] | None]] = {}
        # topic name -> (its id, its partition count, its bytes before the partitions): they do
        # not depend on the cluster, so a new ClusterImage (a broker fenced) hands them to the
        # next shape, and not on the partitions' state, so a topic whose leaders moved (a new
        # TopicImage) keeps its prefix (issue 24: the first answer after a cluster change)
        self.prefixes: dict[str, tuple[Uuid, int, bytes]] = {} if prefixes is None else prefixes
        self.answer: _Answer | None = None
        #: the last all-topics answer of the shape this one replaces (another ClusterImage): its
        #: topics that are still the same objects are sliced again from their blocks' new rows
        self.previous = previous


def _block_rows(shape: _TopicBytes, block: Rows, version: int) -> tuple[Rows, bytes, npt.NDArray[np.int64] | None]:
    """``block``'s rows encoded for ``shape`` (cached): (block, bytes, int64 row offsets), the
    offsets None when a list is too long for the columnar encoding."""
    enc = shape.blocks.get(id(block))
    if enc is None or enc[0] is not block:
        try:
            buf, row_offsets = encode_block_partitions(block, shape.table, version)
            enc = (block, buf, row_offsets)
        except ValueError:
            enc = (block, b"", None)
        shape.blocks[id(block)] = enc
    return enc


#: what :meth:`BrokerApis._topic_piece` says of a topic's bytes: (block, first row, end row,
#: prefix length) when they are a block slice, else None
_Span = tuple[Rows, int, int, int]
#: a previous answer's topics, block_of, row_start and row_stop as lists (read once a topic)
_PrevRows = tuple[list[TopicImage], list[int], list[int], list[int]]
#: own blocks (:meth:`BrokerApis._own_block`) kept when their dict is cut (the newest)
_OWN_BLOCKS_KEPT = 16384


def _topic_ops(version: int, body: Any) -> int:
    """A topic's authorized operations in this answer (omitted unless asked, v8+)."""
    if version >= 8 and body.include_topic_authorized_operations:
        return TOPIC_AUTHORIZED_OPERATIONS
    return AUTHORIZED_OPERATIONS_OMITTED


def _kept_topics(prev: _Answer, objects: list[TopicImage]) -> npt.NDArray[np.int64]:
    """The index in ``prev`` of each of ``objects`` (-1: not in it).  A new image usually replaces
    a few topics in place (same count, same order): then one identity comparison a position, in
    C, and the replaced ones count as new (a topic found again at another index would only be
    encoded once more).  Otherwise (topics created or deleted) through ``prev.positions()``."""
    n = len(objects)
    if n == len(prev.objects):
        same = np.fromiter(map(operator.is_, objects, prev.objects), dtype=np.bool_, count=n)
        if n - int(np.count_nonzero(same)) <= max(16, n >> 6):
            return np.where(same, np.arange(n, dtype=np.int64), np.int64(-1))
    pos = prev.positions()
    return np.fromiter(map(pos.get, map(id, objects), repeat(-1)), dtype=np.int64, count=n)


def _live_blocks(blocks: list[Rows], block_of: npt.NDArray[np.int32]) -> tuple[list[Rows], npt.NDArray[np.int32]]:
    """The blocks some topic still slices, renumbered (an answer must not keep dropped blocks)."""
    used = np.unique(block_of[block_of >= 0])
    if len(used) == len(blocks):
        return blocks, block_of
    renumber = np.full(len(blocks) + 1, -1, dtype=np.int32)
    renumber[used] = np.arange(len(used), dtype=np.int32)
    return [blocks[k] for k in used.tolist()], renumber[block_of]


# ---------------------------------------------------------------------------------------------
# The APIs
# ---------------------------------------------------------------------------------------------

class BrokerApis:
    """The broker listener's read APIs (see the module doc).

    ``forwarded``: handlers of the admin writes (CreateTopics, ...) the forwarding side adds
    to this listener's table (they are advertised by ApiVersions too).  ``auto_create``: the
    hook that asks the controller to create topics (None: auto-creation disabled)."""

    def __init__(self, node_id: int, cluster_id: str, cache: KRaftMetadataCache, listener_name: str,
                 config_props: Mapping[str, str], supported_features: Mapping[str, tuple[int, int]],
                 forwarded: Mapping[int, Handler] | None = None, *,
                 auto_create: Callable[[list[str]], None] | None = None,
                 partition_handlers: Mapping[int, Handler] | None = None) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.cache = cache
        self.listener_name = listener_name
        self.config_props = dict(config_props)
        self.supported_features = dict(supported_features)
        self.forwarded = dict(forwarded or {})
        #: Produce, Fetch, ListOffsets, FindCoordinator (issue 25: ``partition_apis.PartitionApis``)
        self.partition_handlers = dict(partition_handlers or {})
        self.auto_create = auto_create
        enabled = _bool_config(self.config_props, "auto.create.topics.enable", True)
        if enabled and auto_create is None:
            log.warning("broker %d: auto.create.topics.enable is true but this broker has no way to create "
                        "topics yet (no forwarding to the controller): auto-creation is disabled", node_id)
        #: Kafka's autoCreateTopicsEnable, effective (a hook is needed)
        self.auto_create_topics_enable = enabled and auto_create is not None
        self.max_request_partition_size_limit = _int_config(
            self.config_props, "max.request.partition.size.limit", MAX_REQUEST_PARTITION_SIZE_LIMIT)
        if self.max_request_partition_size_limit < 1:
            raise ValueError(f"max.request.partition.size.limit: must be at least 1, got "
                             f"{self.max_request_partition_size_limit}")
        self._topic_bytes: dict[tuple[int, str, bool], _TopicBytes] = {}
        #: id(TopicPartitions) -> (it, its partitions as a block of their own): see _own_block
        self._own_blocks: dict[int, tuple[TopicPartitions, TopicRows]] = {}

    def handlers(self) -> dict[int, Handler]:
        table: dict[int, Handler] = {
            int(_KEYS.METADATA): self.handle_metadata,
            int(_KEYS.DESCRIBE_CLUSTER): self.handle_describe_cluster,
            int(_KEYS.DESCRIBE_CONFIGS): self.handle_describe_configs,
            int(_KEYS.DESCRIBE_TOPIC_PARTITIONS): self.handle_describe_topic_partitions,
        }
        table.update(self.forwarded)
        table.update(self.partition_handlers)
        table[int(_KEYS.API_VERSIONS)] = self.handle_api_versions
        return table

    # ------------------------------------------------------------------ ApiVersions
    def handle_api_versions(self, ctx: RequestContext, body: Any) -> Any:
        """The broker listener's ApiVersions (the controller-side twin is node.py's): the keys
        with a handler, the supported features (before v4 without those whose minimum is 0,
        KAFKA-17492) and the image's finalized features (metadata.version included) with the
        image's offset as their epoch (-1 for an empty image: Kafka's "unknown")."""
        version = ctx.api_version
        image = self.cache.image()
        only = {int(k) for k in self.handlers()}
        supported = [(n, lo, hi) for n, (lo, hi) in sorted(self.supported_features.items())
                     if not (version < 4 and lo == 0)]
        finalized = dict(image.features.finalized_versions)
        mv = image.features.metadata_version()
        if mv is not None:
            finalized["metadata.version"] = mv.feature_level
        epoch = image.provenance.last_contained_offset if not image.is_empty() else -1
        resp, _v = answer_api_versions(body, version, "broker", only=only, supported_features=supported,
                                       finalized_features=[(n, lvl, lvl) for n, lvl in sorted(finalized.items())
                                                           if lvl != 0],
                                       finalized_features_epoch=epoch)
        return resp

    # ------------------------------------------------------------------ Metadata
    def metadata_response(self, body: Any, version: int, listener: str | None = None,
                          image: MetadataImage | None = None) -> MetadataResponse:
        """The Metadata answer as a message (the definition the fast path is tested against)."""
        image = self.cache.image() if image is None else image
        listener = self.listener_name if listener is None else listener
        resp, topics = self._metadata_head_and_topics(body, version, listener, image)
        if topics is _ALL:
            topics = list(image.topics.topics_by_id.values())
        resp.topics = [self._topic_message(image, t, version, listener, body) if isinstance(t, TopicImage) else t
                       for t in topics]
        return resp

    def handle_metadata(self, ctx: RequestContext, body: Any) -> Any:
        """Answers with the frame built by :meth:`encode_metadata` (bytes spliced, see the module
        doc).  Without a connection (a direct call) the response message is returned."""
        conn = ctx._conn
        if conn is None:
            return self.metadata_response(body, ctx.api_version, ctx.listener)
        frame = self.encode_metadata(body, ctx.api_version, ctx.header.correlation_id,  # type: ignore[attr-defined]
                                     ctx.listener)
        ctx.respond_frame(frame)  # a pre-encoded frame (see the module doc)
        return DEFERRED

    def encode_metadata(self, body: Any, version: int, correlation_id: int, listener: str | None = None,
                        image: MetadataImage | None = None) -> bytes:
        """The framed Metadata response (size, header, body) for ``body`` at ``version``."""
        image = self.cache.image() if image is None else image
        listener = self.listener_name if listener is None else listener
        resp, topics = self._metadata_head_and_topics(body, version, listener, image)
        frame = encode_response(resp, version, correlation_id)
        include_ops = version >= 8 and bool(body.include_topic_authorized_operations)
        shape = self._shape(version, listener, include_ops, image.cluster)
        if topics is _ALL:
            answer, framed = self._all_topics_answer(shape, image, version, listener, body, frame)
            if framed is not None:
                return framed
            a, b = int(answer.offsets[0]), int(answer.offsets[-1])
            head, tail = _splice_ends(frame, version, len(answer.objects), b - a)
            # one copy of the topics' bytes (a 2 MB answer at 5,000 topics)
            return b"".join((head, memoryview(answer.data)[a:b], tail))
        parts = []
        for t in topics:
            if isinstance(t, TopicImage):
                parts.append(self._cached_topic_bytes(shape, image, t, version, listener, body))
            else:
                parts.append(_encode_topic(t, version))
        return splice_metadata_topics(frame, version, len(parts), parts)

    def _shape(self, version: int, listener: str, include_ops: bool, cluster: ClusterImage) -> _TopicBytes:
        key = (version, listener, include_ops)
        cached = self._topic_bytes.get(key)
        if cached is None or cached.cluster is not cluster:
            previous = None
            if cached is not None:
                previous = cached.answer if cached.answer is not None else cached.previous
            cached = self._topic_bytes[key] = _TopicBytes(cluster, listener,
                                                          None if cached is None else cached.prefixes, previous)
        return cached

    def _cached_topic_bytes(self, shape: _TopicBytes, image: MetadataImage, topic: TopicImage, version: int,
                            listener: str, body: Any) -> bytes:
        hit = shape.by_id.get(id(topic))
        if hit is not None:
            return hit[1]
        if len(shape.by_id) > 2 * len(image.topics.topics_by_id) + 64:
            shape.by_id.clear()  # entries of topics that changed or went: none is reused
            # and the rows of their own blocks (those of the all-topics answer are kept)
            live = set() if shape.answer is None else set(map(id, shape.answer.blocks))
            shape.blocks = {k: v for k, v in shape.blocks.items() if k in live}
        data = self._encode_topic(shape, image, topic, version, listener, body)
        shape.by_id[id(topic)] = (topic, data)
        return data

    def _encode_topic(self, shape: _TopicBytes, image: MetadataImage, topic: TopicImage, version: int,
                      listener: str, body: Any) -> bytes:
        ops = _topic_ops(version, body)
        return self._topic_piece(shape, image, topic, version, listener, ops, topic_suffix(version, ops))[0]

    def _own_block(self, parts: TopicPartitions) -> TopicRows:
        """A topic's partitions as a block of their own (when some are overrides of its block, or
        it has no block): made once per TopicPartitions object, whatever the cluster and shape, so
        a topic whose partitions changed is a block slice like the others (one kernel call, not
        the generated encoder per partition) and is re-sliced after a cluster change."""
        hit = self._own_blocks.get(id(parts))
        if hit is not None and hit[0] is parts:
            return hit[1]
        if len(self._own_blocks) > 2 * _OWN_BLOCKS_KEPT:
            self._own_blocks = dict(list(self._own_blocks.items())[-_OWN_BLOCKS_KEPT:])
        block = topic_rows(parts.block, parts.start, parts.stop, parts.overrides)
        self._own_blocks[id(parts)] = (parts, block)
        return block

    def _topic_piece(self, shape: _TopicBytes, image: MetadataImage, topic: TopicImage, version: int,
                     listener: str, ops: int, suffix: bytes) -> tuple[bytes, _Span | None]:
        """One topic's bytes, and where they come from: its prefix, rows of a block (its own
        block's, or the topic's own partitions as a block: :meth:`_own_block`) encoded by the
        kernel, and ``suffix`` (``topic_suffix(version, ops)``); the generated encoder when a list
        is too long for the columns or the topic has no partitions."""
        parts = topic.partitions
        span: tuple[Rows, int, int] | None = parts.block_span()
        if span is None and len(parts):
            own = self._own_block(parts)
            span = (own, 0, len(own))
        if span is not None:
            block, start, stop = span
            enc = _block_rows(shape, block, version)
            offsets = enc[2]
            if offsets is not None:
                prefix = self._prefix(shape, topic, stop - start, version)
                first, end = int(offsets[start]), int(offsets[stop])
                data = b"".join((prefix, memoryview(enc[1])[first:end], suffix))
                return data, (block, start, stop, len(prefix))
        return _encode_topic(self._topic_message_ops(image, topic, version, listener, ops), version), None

    def _all_topics_answer(self, shape: _TopicBytes, image: MetadataImage, version: int, listener: str,
                           body: Any, frame: bytes) -> tuple[_Answer, bytes | None]:
        """The all-topics answer for ``image`` (see :class:`_Answer`), made from the last one:

        * the same topics and cluster: that answer;
        * the same cluster (a new image: topics changed): the kept topics' bytes copied whole,
          the others encoded (:meth:`_topic_piece`);
        * another cluster (``shape.previous``): the kept topics that were block slices are their
          old prefix, their blocks' rows encoded for this cluster (one kernel call a block) and
          the old suffix -- numpy offsets, no Python step per topic; the others encoded.

        Everything is copied once, by ``join_slices``, into the response: ``frame`` (the response
        with an empty topics array) is split around its topics array and its ends are joined with
        the topics' slices.  Returns (the answer, that framed response; None when the answer was
        already made)."""
        topics = image.topics
        prev = shape.answer
        if prev is not None and prev.topics is topics:
            return prev, None
        same_cluster = prev is not None
        if prev is None:
            prev = shape.previous
        shape.previous = None
        ops = _topic_ops(version, body)
        suffix = topic_suffix(version, ops)
        idx: npt.NDArray[np.int64] | None
        if prev is not None and prev.topics is topics:
            objects, idx, positions = prev.objects, None, prev._positions
        else:
            objects, positions = list(topics.topics_by_id.values()), None
            if prev is None:
                idx = np.full(len(objects), -1, dtype=np.int64)
            else:
                idx = _kept_topics(prev, objects)
        n = len(objects)
        # three slices a topic (prefix, rows, suffix; unused ones empty): buffer, start, stop
        which = np.zeros((n, 3), dtype=np.int32)
        starts = np.zeros((n, 3), dtype=np.int64)
        stops = np.zeros((n, 3), dtype=np.int64)
        block_of = np.full(n, -1, dtype=np.int32)
        row_start = np.zeros(n, dtype=np.int64)
        row_stop = np.zeros(n, dtype=np.int64)
        prefix_len = np.zeros(n, dtype=np.int64)
        buffers: list[bytes] = [b"" if prev is None else prev.data]
        blocks: list[Rows] = [] if prev is None else list(prev.blocks)
        done = np.zeros(n, dtype=np.bool_)
        if prev is not None:
            at = np.arange(n) if idx is None else np.flatnonzero(idx >= 0)
            j = at if idx is None else idx[at]
            block_of[at], row_start[at], row_stop[at] = prev.block_of[j], prev.row_start[j], prev.row_stop[j]
            prefix_len[at] = prev.prefix_len[j]
            o0, o1 = prev.offsets[j], prev.offsets[j + 1]
            if same_cluster:  # the kept topics' bytes are valid as they are
                starts[at, 0], stops[at, 0] = o0, o1
                done[at] = True
            else:
                self._reslice(shape, version, len(suffix), at, o0, o1, blocks, buffers, which, starts, stops,
                              block_of, row_start, row_stop, prefix_len, done)
        todo = np.flatnonzero(~done).tolist()  # new and changed topics, and those not block slices
        if todo:
            self._encode_many(shape, image, objects, todo, version, listener, ops, suffix, buffers, blocks, which,
                              starts, stops, block_of, row_start, row_stop, prefix_len, prev)
        sizes = (stops - starts).sum(axis=1)
        head, tail = _splice_ends(frame, version, n, int(sizes.sum()))
        buffers += (head, tail)
        ends = np.array([len(buffers) - 2, len(buffers) - 1], dtype=np.int32)
        framed = join_slices(buffers, np.concatenate((ends[:1], which.reshape(-1), ends[1:])),
                             np.concatenate(([0], starts.reshape(-1), [0])),
                             np.concatenate(([len(head)], stops.reshape(-1), [len(tail)])))
        offsets = np.empty(n + 1, dtype=np.int64)
        offsets[0] = len(head)
        np.cumsum(sizes, out=offsets[1:])
        offsets[1:] += len(head)
        blocks, block_of = _live_blocks(blocks, block_of)
        if len(shape.blocks) > 2 * len(blocks) + 16:  # rows of blocks no topic slices any more
            live = set(map(id, blocks))
            shape.blocks = {k: v for k, v in shape.blocks.items() if k in live}
        if len(shape.prefixes) > 2 * n + 64:
            live_names = set(topics.topics_by_name)
            shape.prefixes = {k: v for k, v in shape.prefixes.items() if k in live_names}
        answer = shape.answer = _Answer(topics, objects, framed, offsets, blocks, block_of, row_start, row_stop,
                                        prefix_len, positions)
        return answer, framed

    def _prefix(self, shape: _TopicBytes, topic: TopicImage, count: int, version: int) -> bytes:
        """A topic's bytes before its partitions (error, name, id, internal, the partition count),
        cached by name for every cluster and TopicImage of the topic (a name re-created with
        another id, or a partition count changed, misses)."""
        name = topic.name
        hit = shape.prefixes.get(name)
        tid = topic.topic_id
        if hit is None or hit[1] != count or (hit[0] is not tid and hit[0] != tid):
            hit = shape.prefixes[name] = (tid, count, topic_prefix(name, tid.bytes, is_internal_topic(name), count,
                                                                   version))
        return hit[2]

    @staticmethod
    def _changed_rows(objects: list[TopicImage], i: int, blocks: list[Rows], prev: _PrevRows | None
                      ) -> tuple[Rows | None, int, int, Mapping[int, PartitionRegistration]]:
        """What :func:`topics_rows` needs for topic ``i`` (see :meth:`_encode_many`): its block
        rows and overrides, or its previous rows and the overrides changed since."""
        parts = objects[i].partitions
        if prev is not None and i < len(prev[0]) and prev[1][i] >= 0:
            old = prev[0][i]
            was = old.partitions
            if old.topic_id is objects[i].topic_id and was.block is parts.block and was.start == parts.start \
                    and was.stop == parts.stop and was.overrides.keys() <= parts.overrides.keys():
                get = was.overrides.get
                delta = {p: r for p, r in parts.overrides.items() if get(p) is not r}
                return blocks[prev[1][i]], prev[2][i], prev[3][i], delta
        return parts.block, parts.start, parts.stop, parts.overrides

    def _encode_many(self, shape: _TopicBytes, image: MetadataImage, objects: list[TopicImage], todo: list[int],
                     version: int, listener: str, ops: int, suffix: bytes, buffers: list[bytes], blocks: list[Rows],
                     which: npt.NDArray[np.int32], starts: npt.NDArray[np.int64], stops: npt.NDArray[np.int64],
                     block_of: npt.NDArray[np.int32], row_start: npt.NDArray[np.int64],
                     row_stop: npt.NDArray[np.int64], prefix_len: npt.NDArray[np.int64],
                     prev: _Answer | None = None) -> None:
        """The slices of the topics ``todo`` (indices into ``objects``): block slices where the
        topic is all rows of a block; the topics with overrides (or no block) gathered into one
        :class:`TopicRows` for all of them (:func:`topics_rows`), so they are slices too; each
        distinct block encoded once by the kernel.  The generated encoder only for a topic with
        no partitions or a list too long for the columns.  Python per topic: its span and prefix.

        A topic changed in place (``prev`` has the same topic at the same index, as rows
        ``a .. b`` of one of ``blocks``, over the same block as now) starts from those rows and
        reads only the overrides that are not the previous ones (identity): after leaders moved
        again and again every partition of a small topic is an override, and reading all of them
        each time cost ~5 us a partition."""
        spans: list[tuple[Rows, int, int] | None] = [objects[i].partitions.block_span() for i in todo]
        own = [k for k, span in enumerate(spans) if span is None and len(objects[todo[k]].partitions)]
        if own:
            was = None if prev is None else (prev.objects, prev.block_of.tolist(), prev.row_start.tolist(),
                                             prev.row_stop.tolist())
            wanted = [self._changed_rows(objects, todo[k], blocks, was) for k in own]
            rows, bounds = topics_rows(wanted)
            cut = bounds.tolist()
            for j, k in enumerate(own):
                spans[k] = (rows, cut[j], cut[j + 1])
        block_index = {id(b): k for k, b in enumerate(blocks)}
        encoded: dict[int, npt.NDArray[np.int64] | None] = {}
        at: list[int] = []
        at_block: list[int] = []
        first: list[int] = []
        end: list[int] = []
        plen: list[int] = []
        pbuf: list[int] = []
        for k, i in enumerate(todo):
            span = spans[k]
            topic = objects[i]
            if span is not None:
                block, a, b = span
                bk = block_index.get(id(block))
                if bk is None:
                    bk = block_index[id(block)] = len(blocks)
                    blocks.append(block)
                if bk not in encoded:
                    encoded[bk] = _block_rows(shape, block, version)[2]
                if encoded[bk] is not None:
                    prefix = self._prefix(shape, topic, b - a, version)
                    at.append(i)
                    at_block.append(bk)
                    first.append(a)
                    end.append(b)
                    plen.append(len(prefix))
                    pbuf.append(len(buffers))
                    buffers.append(prefix)
                    continue
            data = _encode_topic(self._topic_message_ops(image, topic, version, listener, ops), version)
            which[i, 0], stops[i, 0], block_of[i] = len(buffers), len(data), -1
            buffers.append(data)
        if not at:
            return
        idx = np.array(at, dtype=np.intp)
        bk_arr = np.array(at_block, dtype=np.int32)
        a_arr = np.array(first, dtype=np.int64)
        b_arr = np.array(end, dtype=np.int64)
        block_of[idx], row_start[idx], row_stop[idx] = bk_arr, a_arr, b_arr
        prefix_len[idx] = stops[idx, 0] = plen
        which[idx, 0] = pbuf
        buffer_of = np.zeros(len(blocks), dtype=np.int32)
        base = np.zeros(len(blocks), dtype=np.int64)
        row_offsets: list[npt.NDArray[np.int64]] = []
        count = 0
        for bk, offsets in encoded.items():
            if offsets is not None:
                buffer_of[bk], base[bk] = len(buffers), count
                buffers.append(shape.blocks[id(blocks[bk])][1])
                row_offsets.append(offsets)
                count += len(offsets)
        all_rows = row_offsets[0] if len(row_offsets) == 1 else np.concatenate(row_offsets)
        which[idx, 1] = buffer_of[bk_arr]
        starts[idx, 1], stops[idx, 1] = all_rows[base[bk_arr] + a_arr], all_rows[base[bk_arr] + b_arr]
        which[idx, 2], stops[idx, 2] = len(buffers), len(suffix)
        buffers.append(suffix)

    @staticmethod
    def _reslice(shape: _TopicBytes, version: int, suffix_len: int, at: npt.NDArray[np.intp],
                 o0: npt.NDArray[np.int64], o1: npt.NDArray[np.int64], blocks: list[Rows],
                 buffers: list[bytes], which: npt.NDArray[np.int32], starts: npt.NDArray[np.int64],
                 stops: npt.NDArray[np.int64], block_of: npt.NDArray[np.int32], row_start: npt.NDArray[np.int64],
                 row_stop: npt.NDArray[np.int64], prefix_len: npt.NDArray[np.int64],
                 done: npt.NDArray[np.bool_]) -> None:
        """The slices of the kept topics ``at`` (old bytes ``prev.data[o0:o1]``) that are block
        slices under a new cluster: old prefix (buffer 0), the block's rows encoded for
        ``shape`` (a buffer a block), old suffix (buffer 0); marks them ``done``.  A block whose
        rows cannot be encoded in columns leaves its topics to the caller."""
        mine = block_of[at]
        used = np.unique(mine[mine >= 0])
        buffer_of = np.full(len(blocks) + 1, -1, dtype=np.int32)  # the last entry: "no block"
        base = np.zeros(len(blocks) + 1, dtype=np.int64)
        row_offsets: list[npt.NDArray[np.int64]] = []
        count = 0
        for b in used.tolist():
            enc = _block_rows(shape, blocks[b], version)
            if enc[2] is None:  # a list too long for the compact count
                continue
            buffer_of[b], base[b] = len(buffers), count
            buffers.append(enc[1])
            row_offsets.append(enc[2])
            count += len(enc[2])
        if not row_offsets:
            return
        good = buffer_of[mine] >= 0  # mine == -1 reads the "no block" entry
        a, bo = at[good], mine[good]
        first, last = o0[good], o1[good]
        rows = row_offsets[0] if len(row_offsets) == 1 else np.concatenate(row_offsets)
        starts[a, 0], stops[a, 0] = first, first + prefix_len[a]
        which[a, 1] = buffer_of[bo]
        starts[a, 1], stops[a, 1] = rows[base[bo] + row_start[a]], rows[base[bo] + row_stop[a]]
        starts[a, 2], stops[a, 2] = last - suffix_len, last
        done[a] = True

    def _topic_message(self, image: MetadataImage, topic: TopicImage, version: int, listener: str,
                       body: Any) -> Any:
        return self._topic_message_ops(image, topic, version, listener, _topic_ops(version, body))

    def _topic_message_ops(self, image: MetadataImage, topic: TopicImage, version: int, listener: str,
                           ops: int) -> Any:
        views = [partition_view(image, pid, reg, listener, filter_unavailable=version == 0,
                                error_unavailable_listeners=version >= 6)
                 for pid, reg in topic.partitions.items()]
        return _MR.MetadataResponseTopic(
            error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=is_internal_topic(topic.name),
            partitions=[_metadata_partition(v) for v in views], topic_authorized_operations=ops)

    def _metadata_head_and_topics(self, body: Any, version: int, listener: str,
                                  image: MetadataImage) -> tuple[MetadataResponse, Any]:
        """(the response with its topics empty, what goes in the topics: ``_ALL`` or a list of
        TopicImage -- encoded from the image -- and ready error messages)."""
        cache = self.cache
        brokers = [_MR.MetadataResponseBroker(node_id=b.id, host=b.host, port=b.port, rack=b.rack)
                   for b in cache.alive_broker_endpoints(image, listener)]
        controller = cache.random_alive_broker_id(image)
        cluster_ops = AUTHORIZED_OPERATIONS_OMITTED
        if 8 <= version <= 10 and body.include_cluster_authorized_operations:
            cluster_ops = CLUSTER_AUTHORIZED_OPERATIONS
        resp = _MR(throttle_time_ms=0, brokers=brokers, cluster_id=self.cluster_id,
                   controller_id=-1 if controller is None else controller, topics=[],
                   cluster_authorized_operations=cluster_ops, error_code=0)
        requested = body.topics
        if requested is None or (version == 0 and not requested):
            return resp, _ALL
        # Topic ids are refused before v12, and null names too (Kafka: InvalidRequestException,
        # answered as an error on every requested topic)
        for t in requested:
            if version < 12 and (t.name is None or t.topic_id != ZERO_UUID):
                what = "Topic name can not be null" if t.name is None else "Topic IDs are not supported in requests"
                log.debug("Metadata v%d: %s for version %d", version, what, version)
                return resp, [_MR.MetadataResponseTopic(error_code=int(Errors.INVALID_REQUEST),
                                                        name=x.name if x.name is not None else "",
                                                        topic_id=x.topic_id, is_internal=False, partitions=[])
                              for x in requested]
        out: list[Any] = []
        ids = [t.topic_id for t in requested if t.topic_id != ZERO_UUID]
        seen: set[Any] = set()
        if ids:
            for tid in ids:
                if tid in seen:
                    continue
                seen.add(tid)
                topic = image.topics.get_topic(tid)
                if topic is None:
                    out.append(_MR.MetadataResponseTopic(error_code=int(Errors.UNKNOWN_TOPIC_ID), name=None,
                                                         topic_id=tid, is_internal=False, partitions=[]))
                else:
                    out.append(topic)
            return resp, out
        missing: list[str] = []
        for t in requested:
            name = t.name
            if name in seen:
                continue
            seen.add(name)
            topic = image.topics.get_topic_by_name(name)
            if topic is not None:
                out.append(topic)
            else:
                missing.append(name)
        allow_auto = self.auto_create_topics_enable and (version < 4 or bool(body.allow_auto_topic_creation))
        creatable: list[str] = []
        for name in missing:
            reason = topic_name_error(name)
            if reason is not None:
                code = Errors.INVALID_TOPIC_EXCEPTION
            elif allow_auto:
                code = Errors.LEADER_NOT_AVAILABLE
                creatable.append(name)
            else:
                code = Errors.UNKNOWN_TOPIC_OR_PARTITION
            out.append(_MR.MetadataResponseTopic(error_code=int(code), name=name, topic_id=ZERO_UUID,
                                                 is_internal=is_internal_topic(name), partitions=[]))
        if creatable and self.auto_create is not None:
            try:
                self.auto_create(creatable)
            except Exception:  # noqa: BLE001 - the answer stays LEADER_NOT_AVAILABLE; the client retries
                log.exception("broker %d: auto-creating topics %s failed", self.node_id, creatable)
        return resp, out

    # ------------------------------------------------------------------ DescribeCluster
    def handle_describe_cluster(self, ctx: RequestContext, body: Any) -> Any:
        """Kafka's broker answer (KafkaApis.handleDescribeCluster): the alive brokers with an
        endpoint on this listener (v2 ``include_fenced_brokers``: the fenced ones too, flagged),
        a random alive broker as controller id; a CONTROLLER endpoint type asked of a broker
        is MISMATCHED_ENDPOINT_TYPE (INVALID_REQUEST at v0), an unknown one
        UNSUPPORTED_ENDPOINT_TYPE."""
        R: Any = DescribeClusterResponse
        version = ctx.api_version
        wanted = int(body.endpoint_type) if version >= 1 else _BROKER_ENDPOINT
        if wanted not in _ENDPOINT_TYPES:
            code = Errors.INVALID_REQUEST if version == 0 else Errors.UNSUPPORTED_ENDPOINT_TYPE
            return R(error_code=int(code), error_message=f"Unsupported endpoint type {wanted}")
        if wanted != _BROKER_ENDPOINT:
            code = Errors.INVALID_REQUEST if version == 0 else Errors.MISMATCHED_ENDPOINT_TYPE
            return R(error_code=int(code),
                     error_message=(f"The request was sent to an endpoint of type {_ENDPOINT_TYPES[_BROKER_ENDPOINT]}, "
                                    f"but we wanted an endpoint of type {_ENDPOINT_TYPES[wanted]}"))
        image = self.cache.image()
        listener = ctx.listener
        include_fenced = version >= 2 and bool(body.include_fenced_brokers)
        brokers = []
        regs = image.cluster.brokers
        for bid in sorted(regs):
            b = regs[bid]
            if b.fenced and not include_fenced:
                continue
            ep = b.listeners.get(listener)
            if ep is None:
                continue
            brokers.append(R.DescribeClusterBroker(broker_id=bid, host=ep.host, port=ep.port, rack=b.rack,
                                                   is_fenced=b.fenced))
        controller = self.cache.random_alive_broker_id(image)
        ops = CLUSTER_AUTHORIZED_OPERATIONS if body.include_cluster_authorized_operations \
            else AUTHORIZED_OPERATIONS_OMITTED
        return R(throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=_BROKER_ENDPOINT,
                 cluster_id=self.cluster_id, controller_id=-1 if controller is None else controller,
                 brokers=brokers, cluster_authorized_operations=ops)

    # ------------------------------------------------------------------ DescribeConfigs
    def handle_describe_configs(self, ctx: RequestContext, body: Any) -> Any:
        return describe_configs(self.cache.image(), body, ctx.api_version, node_id=self.node_id,
                                static_config=self.config_props)

    # ------------------------------------------------------------------ DescribeTopicPartitions
    def handle_describe_topic_partitions(self, ctx: RequestContext, body: Any) -> Any:
        """KIP-966 (Kafka's DescribeTopicPartitionsRequestHandler): the requested topics (all
        when none are named) from the cursor on, sorted by name, at most
        ``min(max.request.partition.size.limit, response_partition_limit)`` (at least 1)
        partitions; ``next_cursor`` names where the next page starts.  Unknown or invalid names
        are reported (not when listing all topics).  A cursor topic missing from a named list,
        or a negative cursor partition, is INVALID_REQUEST on every topic."""
        R: Any = DescribeTopicPartitionsResponse
        image = self.cache.image()
        listener = ctx.listener
        cursor = body.cursor
        cursor_name = cursor.topic_name if cursor is not None else ""
        fetch_all = not body.topics
        if fetch_all:
            names = {n for n in image.topics.topics_by_name if n >= cursor_name}
        else:
            names = {t.name for t in body.topics if t.name >= cursor_name}
            if cursor is not None and cursor.topic_name not in names:
                return _dtp_invalid(body, "DescribeTopicPartitionsRequest topic list should contain the cursor "
                                          f"topic: {cursor.topic_name}")
        if cursor is not None and cursor.partition_index < 0:
            return _dtp_invalid(body, "DescribeTopicPartitionsRequest cursor partition must be valid: "
                                      f"Cursor(topicName={cursor.topic_name}, "
                                      f"partitionIndex={cursor.partition_index})")
        remaining = max(min(self.max_request_partition_size_limit, int(body.response_partition_limit)), 1)
        topics_out: list[Any] = []
        next_cursor = None
        for name in sorted(names):
            if remaining <= 0:
                next_cursor = R.Cursor(topic_name=name, partition_index=0)
                break
            topic = image.topics.get_topic_by_name(name)
            if topic is None:
                if not fetch_all:
                    code = Errors.INVALID_TOPIC_EXCEPTION if topic_name_error(name) is not None \
                        else Errors.UNKNOWN_TOPIC_OR_PARTITION
                    topics_out.append(R.DescribeTopicPartitionsResponseTopic(
                        error_code=int(code), name=name, topic_id=ZERO_UUID, is_internal=is_internal_topic(name),
                        partitions=[], topic_authorized_operations=TOPIC_AUTHORIZED_OPERATIONS))
                continue
            start = cursor.partition_index if cursor is not None and name == cursor_name else 0
            size = len(topic.partitions)
            upper = min(size, start + remaining)
            parts = []
            for pid in range(start, upper):
                reg = topic.partitions.get(pid)
                if reg is None:
                    log.warning("The partition %d does not exist for %s", pid, name)
                    continue
                v = partition_view(image, pid, reg, listener)
                parts.append(R.DescribeTopicPartitionsResponsePartition(
                    error_code=0, partition_index=pid, leader_id=v.leader_id, leader_epoch=v.leader_epoch,
                    replica_nodes=list(v.replicas), isr_nodes=list(v.isr),
                    eligible_leader_replicas=list(v.elr), last_known_elr=list(v.last_known_elr),
                    offline_replicas=list(v.offline_replicas)))
            topics_out.append(R.DescribeTopicPartitionsResponseTopic(
                error_code=0, name=name, topic_id=topic.topic_id, is_internal=is_internal_topic(name),
                partitions=parts, topic_authorized_operations=TOPIC_AUTHORIZED_OPERATIONS))
            if upper < size:
                next_cursor = R.Cursor(topic_name=name, partition_index=upper)
                break
            remaining -= len(parts)
        return R(throttle_time_ms=0, topics=topics_out, next_cursor=next_cursor)


#: "every topic" marker of :meth:`BrokerApis._metadata_head_and_topics`
_ALL: Any = object()


def _metadata_partition(v: PartitionView) -> Any:
    return _MR.MetadataResponsePartition(
        error_code=int(v.error), partition_index=v.partition_id,
        leader_id=v.leader_id if v.leader_id >= 0 else NO_LEADER_ID, leader_epoch=v.leader_epoch,
        replica_nodes=list(v.replicas), isr_nodes=list(v.isr), offline_replicas=list(v.offline_replicas))


def _dtp_invalid(body: Any, message: str) -> Any:
    """Kafka's error answer to a DescribeTopicPartitions it refuses: every requested topic with
    INVALID_REQUEST (the message is logged: the response has no field for it)."""
    log.info("refusing DescribeTopicPartitions: %s", message)
    R: Any = DescribeTopicPartitionsResponse
    return R(throttle_time_ms=0, topics=[R.DescribeTopicPartitionsResponseTopic(
        error_code=int(Errors.INVALID_REQUEST), name=t.name, topic_id=ZERO_UUID, is_internal=False,
        partitions=[]) for t in body.topics], next_cursor=None)
