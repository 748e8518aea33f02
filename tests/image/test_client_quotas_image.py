"""ClientQuotasImage / ClientQuotasDelta: Kafka's ClientQuotasImageTest, the controller writing the
same bytes, and structural sharing."""
from __future__ import annotations

import pytest
from support.images import check_all_intermediate_images, image_records, replay_all

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.controller.security_control import CLIENT_ID, IP, USER, ClientQuotaControlManager
from kraft_node.metadata.image.client_quotas import (
    ClientQuotaEntity,
    ClientQuotaImage,
    ClientQuotasDelta,
    ClientQuotasImage,
)
from kraft_storage.messages.metadata import ClientQuotaRecord, ConfigRecord
from kraft_storage.timeline import SnapshotRegistry

PRODUCER, CONSUMER = "producer_byte_rate", "consumer_byte_rate"
FOO_USER = ClientQuotaEntity({USER: "foo"})
BAR_USER_AND_IP = ClientQuotaEntity({USER: "bar", IP: "127.0.0.1"})


def quota(entity: dict[str, str | None], key: str, value: float = 0.0, remove: bool = False) -> ApiMessageAndVersion:
    data = [ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()]
    return ApiMessageAndVersion(ClientQuotaRecord(entity=data, key=key, value=value, remove=remove), 0)


IMAGE1 = ClientQuotasImage({FOO_USER: ClientQuotaImage({PRODUCER: 123.0}),
                            BAR_USER_AND_IP: ClientQuotaImage({CONSUMER: 456.0})})
DELTA1_RECORDS = [
    quota({USER: "bar", IP: "127.0.0.1"}, CONSUMER, remove=True),  # remove a quota
    quota({USER: "foo"}, PRODUCER, 234.0),                          # alter a quota
    quota({USER: "foo"}, CONSUMER, 999.0),                          # add one to an entity that has one
]
IMAGE2 = ClientQuotasImage({FOO_USER: ClientQuotaImage({PRODUCER: 234.0, CONSUMER: 999.0})})


def check_to_image(image: ClientQuotasImage, records: list[ApiMessageAndVersion] | None = None) -> None:
    check_all_intermediate_images(ClientQuotasImage.EMPTY, ClientQuotasDelta, image,
                                  image_records(image) if records is None else records)


@pytest.mark.parametrize("image", [ClientQuotasImage.EMPTY, IMAGE1, IMAGE2], ids=["empty", "image1", "image2"])
def test_image_round_trip(image: ClientQuotasImage) -> None:
    check_to_image(image)


def test_apply_delta1() -> None:
    assert replay_all(ClientQuotasDelta(IMAGE1), DELTA1_RECORDS).apply() == IMAGE2
    check_to_image(IMAGE2, image_records(IMAGE1) + DELTA1_RECORDS)


def test_entity_is_the_same_in_any_order() -> None:
    after = replay_all(ClientQuotasDelta(IMAGE1), [quota({IP: "127.0.0.1", USER: "bar"}, "x", 1.0)]).apply()
    assert dict(after.quotas(BAR_USER_AND_IP)) == {CONSUMER: 456.0, "x": 1.0}
    assert dict(after.quotas(ClientQuotaEntity({USER: "nobody"}))) == {}


def test_same_records_as_the_controller() -> None:
    records = image_records(IMAGE1) + DELTA1_RECORDS + [
        quota({USER: None}, PRODUCER, 1.0), quota({USER: None, CLIENT_ID: None}, CONSUMER, 2.0),
        quota({CLIENT_ID: "app"}, "request_percentage", 50.0), quota({IP: None}, "connection_creation_rate", 10.0),
        quota({USER: "alice", CLIENT_ID: "app"}, PRODUCER, 3.0), quota({USER: "foo"}, PRODUCER, remove=True)]
    manager = ClientQuotaControlManager(SnapshotRegistry())
    for offset, r in enumerate(records):
        manager.replay(r.message, offset)
    image = replay_all(ClientQuotasDelta(ClientQuotasImage.EMPTY), records).apply()
    written = image_records(image)
    assert [r.encode() for r in written] == [r.encode() for r in manager.snapshot_records()]
    assert len(written) == 6


def test_finish_snapshot() -> None:
    delta = replay_all(ClientQuotasDelta(IMAGE2), [quota({USER: "foo"}, CONSUMER, 999.0),
                                                   quota({USER: "new"}, PRODUCER, 5.0)])
    delta.finish_snapshot()
    assert delta.apply() == ClientQuotasImage({FOO_USER: ClientQuotaImage({CONSUMER: 999.0}),
                                               ClientQuotaEntity({USER: "new"}): ClientQuotaImage({PRODUCER: 5.0})})


def test_wrong_record_type() -> None:
    with pytest.raises(ReplayError, match="ClientQuotasDelta cannot replay ConfigRecord"):
        ClientQuotasDelta(IMAGE1).replay(ConfigRecord())


def test_structural_sharing() -> None:
    image = ClientQuotasImage({ClientQuotaEntity({USER: f"u{i}"}): ClientQuotaImage({PRODUCER: float(i)})
                               for i in range(300)})
    after = replay_all(ClientQuotasDelta(image), [quota({USER: "u3"}, PRODUCER, 33.0)]).apply()
    assert all(after.entities[e] is q for e, q in image.entities.items() if e != ClientQuotaEntity({USER: "u3"}))
    assert replay_all(ClientQuotasDelta(image), [quota({USER: "u3"}, PRODUCER, 3.0),
                                                 quota({USER: "u9"}, "nothing", remove=True)]).apply() is image
    assert ClientQuotasDelta(image).apply() is image


def test_repr() -> None:
    assert repr(IMAGE2) == ("ClientQuotasImage({ClientQuotaEntity(entries={user=foo}): "
                            "ClientQuotaImage({consumer_byte_rate=999.0, producer_byte_rate=234.0})})")
    assert "producer_byte_rate" in repr(replay_all(ClientQuotasDelta(IMAGE1), DELTA1_RECORDS[1:2]))
