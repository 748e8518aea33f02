"""Every sub-image but topics against the Kafka fixtures (3.6, 3.7, 4.0, 4.2 logs and checkpoints).

For each file: its records of each sub-image's types replay into that delta; the image, written at
the file's metadata.version and replayed again, is the same image; and for a checkpoint (written
by Kafka's own image writer) the records kraft writes are Kafka's, byte for byte, as a multiset --
the order differs only where Kafka iterates a HashMap (config keys, feature names), which kraft
replaces by a sorted order.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import fixture_params
from support.images import image_records, replay_all
from support.messages import iter_records

from kraft_node.metadata.image.acls import AclsDelta, AclsImage
from kraft_node.metadata.image.client_quotas import ClientQuotasDelta, ClientQuotasImage
from kraft_node.metadata.image.cluster import ClusterDelta, ClusterImage
from kraft_node.metadata.image.configs import ConfigurationsDelta, ConfigurationsImage
from kraft_node.metadata.image.delegation_tokens import DelegationTokenDelta, DelegationTokenImage
from kraft_node.metadata.image.features import FeaturesDelta, FeaturesImage
from kraft_node.metadata.image.producer_ids import ProducerIdsDelta, ProducerIdsImage
from kraft_node.metadata.image.scram import ScramDelta, ScramImage
from kraft_storage.messages import metadata as m
from kraft_storage.messages.metadata import decode_metadata_record

#: (empty image, delta type, the record types it takes)
SUB_IMAGES: list[tuple[Any, Any, set[int]]] = [
    (FeaturesImage.EMPTY, FeaturesDelta, {m.FeatureLevelRecord.API_KEY}),
    (ClusterImage.EMPTY, ClusterDelta, {m.RegisterBrokerRecord.API_KEY, m.UnregisterBrokerRecord.API_KEY,
                                        m.FenceBrokerRecord.API_KEY, m.UnfenceBrokerRecord.API_KEY,
                                        m.BrokerRegistrationChangeRecord.API_KEY, m.RegisterControllerRecord.API_KEY}),
    (ConfigurationsImage.EMPTY, ConfigurationsDelta, {m.ConfigRecord.API_KEY}),
    (ClientQuotasImage.EMPTY, ClientQuotasDelta, {m.ClientQuotaRecord.API_KEY}),
    (ProducerIdsImage.EMPTY, ProducerIdsDelta, {m.ProducerIdsRecord.API_KEY}),
    (AclsImage.EMPTY, AclsDelta, {m.AccessControlEntryRecord.API_KEY, m.RemoveAccessControlEntryRecord.API_KEY}),
    (ScramImage.EMPTY, ScramDelta, {m.UserScramCredentialRecord.API_KEY, m.RemoveUserScramCredentialRecord.API_KEY}),
    (DelegationTokenImage.EMPTY, DelegationTokenDelta, {m.DelegationTokenRecord.API_KEY,
                                                        m.RemoveDelegationTokenRecord.API_KEY}),
]


def metadata_records(path: Path) -> list[tuple[int, bytes]]:
    """(apiKey, record value) of every metadata record of the file, control records left out."""
    out = []
    for _offset, is_control, _key, value in iter_records(path.read_bytes()):
        if not is_control and value is not None:
            out.append((decode_metadata_record(value)[0], bytes(value)))
    return out


@pytest.mark.parametrize("path", fixture_params("*.log", "*.checkpoint"), ids=lambda p: str(p).split("fixtures/")[-1])
def test_fixture_sub_images(path: Path) -> None:
    records = metadata_records(path)
    features = replay_all(FeaturesDelta(FeaturesImage.EMPTY),
                          [decode_metadata_record(v)[2] for k, v in records if k == m.FeatureLevelRecord.API_KEY])
    mv = features.apply().metadata_version_or_throw()
    seen = 0
    for empty, delta_type, keys in SUB_IMAGES:
        kafka = [v for k, v in records if k in keys]
        seen += len(kafka)
        image = replay_all(delta_type(empty), [decode_metadata_record(v)[2] for v in kafka]).apply()
        written = image_records(image, mv)
        assert replay_all(delta_type(empty), written).apply() == image, f"{delta_type.__name__} round trip"
        if path.suffix == ".checkpoint":
            assert Counter(r.encode() for r in written) == Counter(kafka), f"{delta_type.__name__} vs Kafka's writer"
    assert seen > 0
