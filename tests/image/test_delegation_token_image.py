"""DelegationTokenImage / DelegationTokenDelta: Kafka's DelegationTokenImageTest, the loss below 3.6-IV2,
the controller writing the same bytes, and structural sharing."""
from __future__ import annotations

import pytest
from support.images import check_all_intermediate_images, image_records, replay_all

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.controller.security_control import DelegationTokenControlManager
from kraft_node.metadata.image.delegation_tokens import (
    DelegationTokenData,
    DelegationTokenDelta,
    DelegationTokenImage,
)
from kraft_node.metadata.image.writer import UnwritableMetadataError
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages.metadata import DelegationTokenRecord, NoOpRecord, RemoveDelegationTokenRecord
from kraft_storage.timeline import SnapshotRegistry


def token(token_id: str, expiration: int, renewers: tuple[str, ...] = ()) -> DelegationTokenData:
    return DelegationTokenData(token_id, "User:fred", "User:fred", renewers, 0, 1000, expiration)


def record(token_id: str, expiration: int, renewers: tuple[str, ...] = ()) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(token(token_id, expiration, renewers).to_record(), 0)


IMAGE1 = DelegationTokenImage({f"somerandomuuid{i}": token(f"somerandomuuid{i}", 100) for i in (1, 2, 3)})
DELTA1_RECORDS = [
    ApiMessageAndVersion(DelegationTokenRecord(owner="User:fred", requester="User:fred", issue_timestamp=0,
                                               max_timestamp=1000, expiration_timestamp=200,
                                               token_id="somerandomuuid1"), 0),
    ApiMessageAndVersion(RemoveDelegationTokenRecord(token_id="somerandomuuid3"), 0),
]
IMAGE2 = DelegationTokenImage({"somerandomuuid1": token("somerandomuuid1", 200),
                               "somerandomuuid2": token("somerandomuuid2", 100)})


def check_to_image(image: DelegationTokenImage, records: list[ApiMessageAndVersion] | None = None) -> None:
    check_all_intermediate_images(DelegationTokenImage.EMPTY, DelegationTokenDelta, image,
                                  image_records(image) if records is None else records)


@pytest.mark.parametrize("image", [DelegationTokenImage.EMPTY, IMAGE1, IMAGE2], ids=["empty", "image1", "image2"])
def test_image_round_trip(image: DelegationTokenImage) -> None:
    check_to_image(image)


def test_apply_delta1() -> None:
    assert replay_all(DelegationTokenDelta(IMAGE1), DELTA1_RECORDS).apply() == IMAGE2
    check_to_image(IMAGE2, image_records(IMAGE1) + DELTA1_RECORDS)


def test_empty_with_invalid_ibp() -> None:
    assert image_records(DelegationTokenImage.EMPTY, MetadataVersion.IBP_3_5_IV2) == []


def test_image1_with_invalid_ibp() -> None:
    loss = "DelegationTokenImage(somerandomuuid1, somerandomuuid2, somerandomuuid3)"
    with pytest.raises(UnwritableMetadataError) as info:
        image_records(IMAGE1, MetadataVersion.IBP_3_5_IV2)
    assert str(info.value) == ("Metadata has been lost because the following could not be represented in "
                               f"metadata.version 3.5-IV2: {loss}")
    losses: list[str] = []
    assert image_records(IMAGE1, MetadataVersion.IBP_3_6_IV1, losses.append) == []
    assert losses == [loss]
    assert len(image_records(IMAGE1, MetadataVersion.IBP_3_6_IV2)) == 3


def test_same_records_as_the_controller() -> None:
    records = image_records(IMAGE1) + DELTA1_RECORDS + [record("b-token", 5, ("User:a", "User:b")),
                                                        ApiMessageAndVersion(RemoveDelegationTokenRecord(
                                                            token_id="never-there"), 0)]
    manager = DelegationTokenControlManager(SnapshotRegistry())
    for offset, r in enumerate(records):
        manager.replay(r.message, offset)
    image = replay_all(DelegationTokenDelta(DelegationTokenImage.EMPTY), records).apply()
    mv = MetadataVersion.latest_testing()
    assert [r.encode() for r in image_records(image, mv)] == [
        r.encode() for r in manager.snapshot_records(metadata_version=mv)]
    assert image.tokens["b-token"].renewers == ("User:a", "User:b")
    with pytest.raises(UnwritableMetadataError) as info:
        list(manager.snapshot_records(metadata_version=MetadataVersion.IBP_3_6_IV1))
    losses: list[str] = []
    image_records(image, MetadataVersion.IBP_3_6_IV1, losses.append)
    assert losses == [info.value.loss]


def test_finish_snapshot() -> None:
    delta = replay_all(DelegationTokenDelta(IMAGE1), [record("somerandomuuid2", 100), record("new", 7)])
    delta.finish_snapshot()
    assert delta.apply() == DelegationTokenImage({"somerandomuuid2": token("somerandomuuid2", 100),
                                                  "new": token("new", 7)})


def test_wrong_record_type() -> None:
    with pytest.raises(ReplayError, match="DelegationTokenDelta cannot replay NoOpRecord"):
        DelegationTokenDelta(IMAGE1).replay(NoOpRecord())


def test_structural_sharing() -> None:
    image = DelegationTokenImage({f"t{i}": token(f"t{i}", i) for i in range(300)})
    after = replay_all(DelegationTokenDelta(image), [record("t4", 44)]).apply()
    assert after.tokens["t4"] == token("t4", 44)
    assert all(after.tokens[i] is t for i, t in image.tokens.items() if i != "t4")
    assert replay_all(DelegationTokenDelta(image), [record("t4", 4)]).apply() is image  # a renewal to the same time
    assert DelegationTokenDelta(image).apply() is image
    assert "somerandomuuid1" in repr(IMAGE2)
