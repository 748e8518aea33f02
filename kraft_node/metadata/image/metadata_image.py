"""The whole cluster's metadata as one immutable value (Kafka's ``MetadataImage`` and ``MetadataDelta``).

Why: every broker and controller turns the committed metadata log into an in-memory
picture of the cluster, and many readers (the request handlers, the publishers) look
at it while the next picture is being built.  An image is never changed: the loader
replays records into a :class:`MetadataDelta` over the current image and ``apply``
makes the next image.  Readers holding the old image keep a consistent view, with no
lock.

Structural sharing, at two levels:

* a sub-image the delta did not touch is the old object (``apply`` reuses it by
  identity: a heartbeat storm that only changes brokers leaves the topics image, all of
  it, shared);
* inside a sub-image the big maps are persistent (``immutables.Map``), so changing one
  of 100,000 topics costs O(log n), not a copy.

Routing (Kafka's ``MetadataDelta.replay``): each record type goes to one sub-delta,
made on first use; ``RemoveTopicRecord`` also drops the topic's configs.  NoOpRecord
changes nothing but the provenance; the transaction records (Begin/End/Abort) are the
loader's business (it holds back a transaction's records until its end), so a delta
ignores them; ``ZkMigrationStateRecord`` is ignored as Kafka 4 ignores it (ZooKeeper
migration is gone).  A record of a type this process does not know is an error: the
loader's fault handler decides what that means (it never skips silently).

Kafka also calls a ``handleMetadataVersionChange`` hook on every sub-delta when
``metadata.version`` changes; all of Kafka 4's are no-ops, so kraft has none: the
writer (:class:`~kraft_node.metadata.image.writer.ImageWriterOptions`) is where a
metadata.version matters, and it reports losses.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.acls import AclsDelta, AclsImage
from kraft_node.metadata.image.client_quotas import ClientQuotasDelta, ClientQuotasImage
from kraft_node.metadata.image.cluster import ClusterDelta, ClusterImage
from kraft_node.metadata.image.configs import ConfigurationsDelta, ConfigurationsImage
from kraft_node.metadata.image.delegation_tokens import DelegationTokenDelta, DelegationTokenImage
from kraft_node.metadata.image.features import FeaturesDelta, FeaturesImage
from kraft_node.metadata.image.producer_ids import ProducerIdsDelta, ProducerIdsImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.image.scram import ScramDelta, ScramImage
from kraft_node.metadata.image.topics import TopicsDelta, TopicsImage
from kraft_node.metadata.image.writer import ImageWriter, ImageWriterOptions, RecordListWriter
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages import metadata as m

__all__ = ["MetadataDelta", "MetadataImage", "UnknownRecordTypeError", "image_records"]


class UnknownRecordTypeError(ValueError):
    """A record whose type no sub-image takes (Kafka: "Unknown metadata record type")."""


@dataclass(frozen=True, eq=True)
class MetadataImage:
    """The cluster at ``provenance`` (offset, epoch, time of the last record in it)."""
    provenance: MetadataProvenance
    features: FeaturesImage
    cluster: ClusterImage
    topics: TopicsImage
    configs: ConfigurationsImage
    client_quotas: ClientQuotasImage
    producer_ids: ProducerIdsImage
    acls: AclsImage
    scram: ScramImage
    delegation_tokens: DelegationTokenImage

    EMPTY: ClassVar[MetadataImage]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetadataImage):
            return NotImplemented
        if self is other:
            return True
        return all(getattr(self, f) is getattr(other, f) or getattr(self, f) == getattr(other, f)
                   for f in _FIELDS)

    __hash__ = None  # type: ignore[assignment]  # a value compared by content, and big: not a dict key

    def is_empty(self) -> bool:
        """No state at all (the provenance does not count): a loader never publishes such an image."""
        return all(getattr(self, f).is_empty() for f in _SUB_IMAGES)

    def highest_offset_and_epoch(self) -> tuple[int, int]:
        return (self.provenance.last_contained_offset, self.provenance.last_contained_epoch)

    @property
    def offset(self) -> int:
        return self.provenance.last_contained_offset

    def metadata_version(self) -> MetadataVersion | None:
        """The finalized metadata.version, or None when the image has none yet."""
        return self.features.metadata_version()

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        """Every sub-image's records, features first (so a snapshot states its metadata.version
        before anything that depends on it), then ``writer.close(True)``."""
        for name in _SUB_IMAGES:
            getattr(self, name).write(writer, options)
        writer.close(True)

    def __repr__(self) -> str:
        parts = ", ".join(f"{f}={getattr(self, f)!r}" for f in _FIELDS)
        return f"MetadataImage({parts})"


_SUB_IMAGES = ("features", "cluster", "topics", "configs", "client_quotas", "producer_ids", "acls", "scram",
               "delegation_tokens")
_FIELDS = ("provenance",) + _SUB_IMAGES

MetadataImage.EMPTY = MetadataImage(
    MetadataProvenance.EMPTY, FeaturesImage.EMPTY, ClusterImage.EMPTY, TopicsImage.EMPTY,
    ConfigurationsImage.EMPTY, ClientQuotasImage.EMPTY, ProducerIdsImage.EMPTY, AclsImage.EMPTY, ScramImage.EMPTY,
    DelegationTokenImage.EMPTY)


class MetadataDelta:
    """The changes replayed on top of ``image`` since it was made; ``apply`` gives the next image.

    Not thread-safe and not immutable: one loader thread owns a delta while it fills it.
    The sub-deltas are made on first use (``None`` until then), so ``apply`` knows which
    sub-images to reuse as they are.
    """

    __slots__ = ("image", "features_delta", "cluster_delta", "topics_delta", "configs_delta",
                 "client_quotas_delta", "producer_ids_delta", "acls_delta", "scram_delta",
                 "delegation_token_delta", "replaced_topics")

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.features_delta: FeaturesDelta | None = None
        self.cluster_delta: ClusterDelta | None = None
        self.topics_delta: TopicsDelta | None = None
        self.configs_delta: ConfigurationsDelta | None = None
        self.client_quotas_delta: ClientQuotasDelta | None = None
        self.producer_ids_delta: ProducerIdsDelta | None = None
        self.acls_delta: AclsDelta | None = None
        self.scram_delta: ScramDelta | None = None
        self.delegation_token_delta: DelegationTokenDelta | None = None
        #: the topics image the bulk path folded (``kraft_node.metadata.image.bulk``): ``apply``
        #: takes it as it is, and ``topics_delta`` stays None -- a publisher that needs per-topic
        #: changes compares ``image.topics`` with the new image's topics (Kafka has no bulk path)
        self.replaced_topics: TopicsImage | None = None

    # -- sub-deltas, made on first use ----------------------------------------------------------

    def get_or_create_features_delta(self) -> FeaturesDelta:
        if self.features_delta is None:
            self.features_delta = FeaturesDelta(self.image.features)
        return self.features_delta

    def get_or_create_cluster_delta(self) -> ClusterDelta:
        if self.cluster_delta is None:
            self.cluster_delta = ClusterDelta(self.image.cluster)
        return self.cluster_delta

    def get_or_create_topics_delta(self) -> TopicsDelta:
        if self.topics_delta is None:
            self.topics_delta = TopicsDelta(self.image.topics)
        return self.topics_delta

    def get_or_create_configs_delta(self) -> ConfigurationsDelta:
        if self.configs_delta is None:
            self.configs_delta = ConfigurationsDelta(self.image.configs)
        return self.configs_delta

    def get_or_create_client_quotas_delta(self) -> ClientQuotasDelta:
        if self.client_quotas_delta is None:
            self.client_quotas_delta = ClientQuotasDelta(self.image.client_quotas)
        return self.client_quotas_delta

    def get_or_create_producer_ids_delta(self) -> ProducerIdsDelta:
        if self.producer_ids_delta is None:
            self.producer_ids_delta = ProducerIdsDelta(self.image.producer_ids)
        return self.producer_ids_delta

    def get_or_create_acls_delta(self) -> AclsDelta:
        if self.acls_delta is None:
            self.acls_delta = AclsDelta(self.image.acls)
        return self.acls_delta

    def get_or_create_scram_delta(self) -> ScramDelta:
        if self.scram_delta is None:
            self.scram_delta = ScramDelta(self.image.scram)
        return self.scram_delta

    def get_or_create_delegation_token_delta(self) -> DelegationTokenDelta:
        if self.delegation_token_delta is None:
            self.delegation_token_delta = DelegationTokenDelta(self.image.delegation_tokens)
        return self.delegation_token_delta

    # -- replay -------------------------------------------------------------------------------

    def replay(self, record: Any) -> None:
        """Fold one metadata record (a generated record object) into this delta."""
        handler = _ROUTES.get(int(getattr(record, "API_KEY", -1)))
        if handler is None:
            raise UnknownRecordTypeError(f"Unknown metadata record type {type(record).__name__}")
        handler(self, record)

    def replay_all(self, records: Iterable[Any]) -> None:
        """``replay`` each record (or ApiMessageAndVersion) in order."""
        routes = _ROUTES
        for record in records:
            if isinstance(record, ApiMessageAndVersion):
                record = record.message
            handler = routes.get(int(getattr(record, "API_KEY", -1)))
            if handler is None:
                raise UnknownRecordTypeError(f"Unknown metadata record type {type(record).__name__}")
            handler(self, record)

    def metadata_version_changed(self) -> MetadataVersion | None:
        """The new metadata.version if this delta changes it (Kafka's ``metadataVersionChanged``)."""
        if self.features_delta is None:
            return None
        return self.features_delta.metadata_version_change()

    def finish_snapshot(self) -> None:
        """After a snapshot's records: drop everything of ``image`` that the snapshot did not re-state
        (a snapshot is the whole state, not a change)."""
        self.get_or_create_features_delta().finish_snapshot()
        self.get_or_create_cluster_delta().finish_snapshot()
        if self.replaced_topics is None:  # a folded topics image is a whole state already
            self.get_or_create_topics_delta().finish_snapshot()
        self.get_or_create_configs_delta().finish_snapshot()
        self.get_or_create_client_quotas_delta().finish_snapshot()
        self.get_or_create_producer_ids_delta().finish_snapshot()
        self.get_or_create_acls_delta().finish_snapshot()
        self.get_or_create_scram_delta().finish_snapshot()
        self.get_or_create_delegation_token_delta().finish_snapshot()

    def replace_topics(self, topics: TopicsImage) -> None:
        """Take ``topics`` (folded in bulk from this delta's topic records) as the next topics image:
        the bulk path's hand-over (its records must not also be replayed into ``topics_delta``).

        A publisher reading a delta must expect it: after a bulk fold, and in the "everything"
        delta a newly installed publisher starts from (the loader's SnapshotManifest), the
        topics are ``replaced_topics`` (a whole TopicsImage) and ``topics_delta`` is None."""
        if self.topics_delta is not None:
            raise ValueError("MetadataDelta: topic records were replayed record at a time; cannot also take "
                             "a folded topics image")
        self.replaced_topics = topics

    def apply(self, provenance: MetadataProvenance) -> MetadataImage:
        """The next image: each sub-image with a delta is applied, every other one reused as it is."""
        img = self.image
        if self.replaced_topics is not None:
            topics = self.replaced_topics
        else:
            topics = img.topics if self.topics_delta is None else self.topics_delta.apply()
        return MetadataImage(
            provenance,
            img.features if self.features_delta is None else self.features_delta.apply(),
            img.cluster if self.cluster_delta is None else self.cluster_delta.apply(),
            topics,
            img.configs if self.configs_delta is None else self.configs_delta.apply(),
            img.client_quotas if self.client_quotas_delta is None else self.client_quotas_delta.apply(),
            img.producer_ids if self.producer_ids_delta is None else self.producer_ids_delta.apply(),
            img.acls if self.acls_delta is None else self.acls_delta.apply(),
            img.scram if self.scram_delta is None else self.scram_delta.apply(),
            img.delegation_tokens if self.delegation_token_delta is None else self.delegation_token_delta.apply(),
        )

    def __repr__(self) -> str:
        parts = ", ".join(f"{s}={getattr(self, s)!r}" for s in self.__slots__[1:] if getattr(self, s) is not None)
        return f"MetadataDelta({parts})"


def _remove_topic(delta: MetadataDelta, record: Any) -> None:
    name = delta.get_or_create_topics_delta().replay(record)
    if name is not None:
        delta.get_or_create_configs_delta().delete_topic(name)


def _nothing(delta: MetadataDelta, record: Any) -> None:
    return None


def _to(getter: Callable[[MetadataDelta], Any]) -> Callable[[MetadataDelta, Any], None]:
    def route(delta: MetadataDelta, record: Any) -> None:
        getter(delta).replay(record)
    return route


_cluster = _to(MetadataDelta.get_or_create_cluster_delta)
_topics = _to(MetadataDelta.get_or_create_topics_delta)

#: apiKey -> what to do with a record of that type
_ROUTES: dict[int, Callable[[MetadataDelta, Any], None]] = {
    m.RegisterBrokerRecord.API_KEY: _cluster,
    m.UnregisterBrokerRecord.API_KEY: _cluster,
    m.FenceBrokerRecord.API_KEY: _cluster,
    m.UnfenceBrokerRecord.API_KEY: _cluster,
    m.BrokerRegistrationChangeRecord.API_KEY: _cluster,
    m.RegisterControllerRecord.API_KEY: _cluster,
    m.TopicRecord.API_KEY: _topics,
    m.PartitionRecord.API_KEY: _topics,
    m.PartitionChangeRecord.API_KEY: _topics,
    m.ClearElrRecord.API_KEY: _topics,
    m.RemoveTopicRecord.API_KEY: _remove_topic,
    m.ConfigRecord.API_KEY: _to(MetadataDelta.get_or_create_configs_delta),
    m.FeatureLevelRecord.API_KEY: _to(MetadataDelta.get_or_create_features_delta),
    m.ClientQuotaRecord.API_KEY: _to(MetadataDelta.get_or_create_client_quotas_delta),
    m.ProducerIdsRecord.API_KEY: _to(MetadataDelta.get_or_create_producer_ids_delta),
    m.AccessControlEntryRecord.API_KEY: _to(MetadataDelta.get_or_create_acls_delta),
    m.RemoveAccessControlEntryRecord.API_KEY: _to(MetadataDelta.get_or_create_acls_delta),
    m.UserScramCredentialRecord.API_KEY: _to(MetadataDelta.get_or_create_scram_delta),
    m.RemoveUserScramCredentialRecord.API_KEY: _to(MetadataDelta.get_or_create_scram_delta),
    m.DelegationTokenRecord.API_KEY: _to(MetadataDelta.get_or_create_delegation_token_delta),
    m.RemoveDelegationTokenRecord.API_KEY: _to(MetadataDelta.get_or_create_delegation_token_delta),
    m.NoOpRecord.API_KEY: _nothing,
    m.ZkMigrationStateRecord.API_KEY: _nothing,
    m.BeginTransactionRecord.API_KEY: _nothing,
    m.EndTransactionRecord.API_KEY: _nothing,
    m.AbortTransactionRecord.API_KEY: _nothing,
}


def image_records(image: MetadataImage, options: ImageWriterOptions | None = None) -> list[ApiMessageAndVersion]:
    """The records that state ``image`` (what a snapshot of it holds), at the image's own
    metadata.version unless ``options`` say otherwise."""
    if options is None:
        mv = image.metadata_version()
        if mv is None:
            mv = MetadataVersion.latest_production()
        options = ImageWriterOptions(mv)
    writer = RecordListWriter()
    image.write(writer, options)
    return writer.records
