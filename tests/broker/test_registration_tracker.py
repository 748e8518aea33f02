"""Kafka's BrokerRegistrationTrackerTest, re-stated: a broker re-registers when the cluster's
metadata.version reaches 3.7-IV2 (directory assignment) while its registration lists no log
directories, and only then."""
from __future__ import annotations

import pytest

from kraft_node.broker.registration_tracker import BrokerRegistrationTracker
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.loader.manifest import LogDeltaManifest
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.raft.messages import LeaderAndEpoch
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

INCARNATION_ID = Uuid("jyjLbk31Tpa53pFrU9Y-Ng")
A, B, C = Uuid("Ahw3vXfnThqeZbb7HD1w6Q"), Uuid("BjOacT0OTNqIvUWIlKhahg"), Uuid("CVHi_iv2Rvy5_1rtPdasfg")
MV = "metadata.version"


class Context:
    def __init__(self) -> None:
        self.calls = 0
        self.tracker = BrokerRegistrationTracker(1, self._refresh)
        self.image = MetadataImage.EMPTY

    def _refresh(self) -> None:
        self.calls += 1

    def new_delta(self) -> MetadataDelta:
        return MetadataDelta(self.image)

    def on_metadata_update(self, delta: MetadataDelta) -> None:
        provenance = MetadataProvenance(0, 0, 0, True)
        self.image = delta.apply(provenance)
        manifest = LogDeltaManifest(provenance, LeaderAndEpoch(-1, 0), 1, 1, 1, 1)
        self.tracker.on_metadata_update(delta, self.image, manifest)


def _register(dirs: list[Uuid]) -> m.RegisterBrokerRecord:
    return m.RegisterBrokerRecord(broker_id=1, incarnation_id=INCARNATION_ID, log_dirs=dirs)


def test_tracker_name():
    assert Context().tracker.name == "BrokerRegistrationTracker(id=1)"


def test_metadata_version_update_without_registration_does_nothing():
    ctx = Context()
    delta = ctx.new_delta()
    delta.replay(m.FeatureLevelRecord(name=MV, feature_level=MetadataVersion.IBP_3_7_IV2.feature_level))
    ctx.on_metadata_update(delta)
    assert ctx.calls == 0


def test_broker_update_without_new_mv_does_nothing():
    ctx = Context()
    delta = ctx.new_delta()
    delta.replay(_register([A, B, C]))
    ctx.on_metadata_update(delta)
    assert ctx.calls == 0


@pytest.mark.parametrize("jbod_mv", [False, True])
def test_broker_update_with_new_mv(jbod_mv):
    ctx = Context()
    delta = ctx.new_delta()
    delta.replay(_register([]))
    mv = MetadataVersion.IBP_3_7_IV2 if jbod_mv else MetadataVersion.IBP_3_7_IV1
    delta.replay(m.FeatureLevelRecord(name=MV, feature_level=mv.feature_level))
    ctx.on_metadata_update(delta)
    assert ctx.calls == (1 if jbod_mv else 0)


@pytest.mark.parametrize("jbod_mv", [False, True])
def test_broker_update_with_new_mv_with_two_deltas(jbod_mv):
    ctx = Context()
    delta = ctx.new_delta()
    delta.replay(_register([]))
    ctx.on_metadata_update(delta)
    assert ctx.calls == 0  # no metadata.version yet
    delta = ctx.new_delta()
    mv = MetadataVersion.IBP_3_7_IV2 if jbod_mv else MetadataVersion.IBP_3_7_IV1
    delta.replay(m.FeatureLevelRecord(name=MV, feature_level=mv.feature_level))
    ctx.on_metadata_update(delta)
    assert ctx.calls == (1 if jbod_mv else 0)


def test_a_registration_with_directories_needs_no_refresh_at_a_jbod_version():
    ctx = Context()
    delta = ctx.new_delta()
    delta.replay(_register([A]))
    delta.replay(m.FeatureLevelRecord(name=MV, feature_level=MetadataVersion.IBP_3_7_IV2.feature_level))
    ctx.on_metadata_update(delta)
    assert ctx.calls == 0
