"""ProducerIdsImage / ProducerIdsDelta: Kafka's ProducerIdsImageTest and kraft's snapshot rule."""
from __future__ import annotations

import pytest
from support.images import check_all_intermediate_images, image_records, replay_all

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.producer_ids import ProducerIdsDelta, ProducerIdsImage
from kraft_storage.messages.metadata import NoOpRecord, ProducerIdsRecord


def grant(broker_id: int, next_id: int) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(ProducerIdsRecord(broker_id=broker_id, broker_epoch=100, next_producer_id=next_id), 0)


IMAGE1 = ProducerIdsImage(123)
DELTA1_RECORDS = [grant(2, 456), grant(3, 780), grant(3, 785), grant(2, 800)]
IMAGE2 = ProducerIdsImage(800)


def check_to_image(image: ProducerIdsImage, records: list[ApiMessageAndVersion] | None = None) -> None:
    check_all_intermediate_images(ProducerIdsImage.EMPTY, ProducerIdsDelta, image,
                                  image_records(image) if records is None else records)


@pytest.mark.parametrize("image", [ProducerIdsImage.EMPTY, IMAGE1, IMAGE2], ids=["empty", "image1", "image2"])
def test_image_round_trip(image: ProducerIdsImage) -> None:
    check_to_image(image)


def test_apply_delta1() -> None:
    assert replay_all(ProducerIdsDelta(IMAGE1), DELTA1_RECORDS).apply() == IMAGE2
    check_to_image(IMAGE2, image_records(IMAGE1) + DELTA1_RECORDS)


def test_written_record() -> None:
    """Kafka's image keeps no broker id or epoch: -1 for both, version 0; nothing while empty."""
    assert image_records(IMAGE2) == [
        ApiMessageAndVersion(ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=800), 0)]
    assert image_records(ProducerIdsImage.EMPTY) == []
    assert image_records(ProducerIdsImage(0)) == [
        ApiMessageAndVersion(ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=0), 0)]


def test_is_empty() -> None:
    assert ProducerIdsImage.EMPTY.is_empty() and ProducerIdsImage.EMPTY.next_producer_id == -1
    assert not ProducerIdsImage(0).is_empty()
    assert not IMAGE1.is_empty()


def test_finish_snapshot() -> None:
    # a snapshot without a ProducerIdsRecord was taken before any grant
    delta = ProducerIdsDelta(IMAGE2)
    delta.finish_snapshot()
    assert delta.apply() == ProducerIdsImage.EMPTY
    # one with it keeps its value
    delta = replay_all(ProducerIdsDelta(IMAGE2), [grant(1, 500)])
    delta.finish_snapshot()
    assert delta.apply() == ProducerIdsImage(500)


def test_unchanged_apply_shares_the_image() -> None:
    assert ProducerIdsDelta(IMAGE1).apply() is IMAGE1
    assert replay_all(ProducerIdsDelta(IMAGE1), [grant(1, 123)]).apply() is IMAGE1


def test_wrong_record_type() -> None:
    with pytest.raises(ReplayError, match="ProducerIdsDelta cannot replay NoOpRecord"):
        ProducerIdsDelta(IMAGE1).replay(NoOpRecord())
    assert repr(IMAGE1) == "ProducerIdsImage(next_producer_id=123)"
