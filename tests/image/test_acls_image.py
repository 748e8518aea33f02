"""AclsImage / AclsDelta: Kafka's AclsImageTest and AclsDeltaTest, the controller writing the same
bytes, and structural sharing."""
from __future__ import annotations

import pytest
from support.images import check_all_intermediate_images, image_records, replay_all

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.controller.security_control import (
    AclControlManager,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kraft_node.metadata.image.acls import AclsDelta, AclsImage, StandardAcl
from kraft_storage.messages.metadata import AccessControlEntryRecord, NoOpRecord, RemoveAccessControlEntryRecord
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import SnapshotRegistry

U = Uuid.from_string
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY

# Kafka's StandardAclTest.TEST_ACLS with StandardAclWithIdTest's ids
TEST_ACLS: list[tuple[Uuid, StandardAcl]] = [
    (U("QZDDv-R7SyaPgetDPGd0Mw"), StandardAcl(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:*",
                                              "*", AclOperation.ALTER, ALLOW)),
    (U("SdDjEdlbRmy2__WFKe3RMg"), StandardAcl(ResourceType.TOPIC, "foo_", PatternType.PREFIXED, "User:*", "*",
                                              AclOperation.READ, ALLOW)),
    (U("wQzt5gkSTwuQNXZF5gIw7A"), StandardAcl(ResourceType.GROUP, "mygroup", PatternType.LITERAL, "User:foo", "*",
                                              AclOperation.READ, DENY)),
    (U("ab_5xjJXSbS1o5jGfhgQXg"), StandardAcl(ResourceType.GROUP, "mygroup", PatternType.PREFIXED, "User:foo", "*",
                                              AclOperation.READ, DENY)),
    (U("wP_cCK0LTEGSX9oDRInJHQ"), StandardAcl(ResourceType.GROUP, "foo", PatternType.PREFIXED, "User:foo", "*",
                                              AclOperation.READ, DENY)),
]


def add(i: int) -> ApiMessageAndVersion:
    acl_id, acl = TEST_ACLS[i]
    return ApiMessageAndVersion(acl.to_record(acl_id), 0)


def remove(acl_id: Uuid) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(RemoveAccessControlEntryRecord(id=acl_id), 0)


IMAGE1 = AclsImage(dict(TEST_ACLS[:4]))
DELTA1_RECORDS = [remove(U("QZDDv-R7SyaPgetDPGd0Mw")), add(4)]
IMAGE2 = AclsImage(dict(TEST_ACLS[1:5]))


def check_to_image(image: AclsImage, records: list[ApiMessageAndVersion] | None = None) -> None:
    check_all_intermediate_images(AclsImage.EMPTY, AclsDelta, image,
                                  image_records(image) if records is None else records)


@pytest.mark.parametrize("image", [AclsImage.EMPTY, IMAGE1, IMAGE2], ids=["empty", "image1", "image2"])
def test_image_round_trip(image: AclsImage) -> None:
    check_to_image(image)


def test_apply_delta1() -> None:
    assert replay_all(AclsDelta(IMAGE1), DELTA1_RECORDS).apply() == IMAGE2
    check_to_image(IMAGE2, image_records(IMAGE1) + DELTA1_RECORDS)


# -- Kafka's AclsDeltaTest ----------------------------------------------------------------------

ACL_ID = U("iOZpss6VQUmD6blnqzl50g")
RECORD = AccessControlEntryRecord(id=ACL_ID, resource_type=1, resource_name="foo", pattern_type=1,
                                  principal="User:user", host="host", operation=1, permission_type=1)


def test_removes_delete_if_not_in_image() -> None:
    delta = AclsDelta(AclsImage.EMPTY)
    assert delta.changes == {}
    delta.replay(RECORD)
    assert delta.changes[ACL_ID] == StandardAcl.from_record(RECORD)
    delta.replay(RemoveAccessControlEntryRecord(id=ACL_ID))
    assert ACL_ID not in delta.changes


def test_keeps_delete_if_in_image() -> None:
    delta = AclsDelta(AclsImage({ACL_ID: StandardAcl.from_record(RECORD)}))
    assert delta.changes == {}
    delta.replay(RemoveAccessControlEntryRecord(id=ACL_ID))
    assert ACL_ID in delta.changes and delta.changes[ACL_ID] is None


def test_throws_on_invalid_state_when_image_is_empty() -> None:
    with pytest.raises(ReplayError, match="Failed to find existing ACL with ID iOZpss6VQUmD6blnqzl50g in either "
                                          "image or changes"):
        AclsDelta(AclsImage.EMPTY).replay(RemoveAccessControlEntryRecord(id=ACL_ID))


def test_throws_on_invalid_state_when_image_has_other_acls() -> None:
    other = U("nGiNMQHwRgmgsIlfu73aJQ")
    image = AclsImage({other: StandardAcl.from_record(RECORD)})
    with pytest.raises(ReplayError, match="Failed to find existing ACL with ID iOZpss6VQUmD6blnqzl50g"):
        AclsDelta(image).replay(RemoveAccessControlEntryRecord(id=ACL_ID))


# -- kraft ----------------------------------------------------------------------------------------

def test_same_records_as_the_controller() -> None:
    records = [add(i) for i in range(5)] + [remove(TEST_ACLS[2][0])]
    manager = AclControlManager(SnapshotRegistry())
    for offset, r in enumerate(records):
        manager.replay(r.message, offset)
    image = replay_all(AclsDelta(AclsImage.EMPTY), records).apply()
    written = image_records(image)
    assert [r.encode() for r in written] == [r.encode() for r in manager.snapshot_records()]
    assert sorted(bytes(r.message.id.bytes) for r in written) == [bytes(r.message.id.bytes) for r in written]


def test_unknown_codes_read_as_unknown() -> None:
    record = AccessControlEntryRecord(id=ACL_ID, resource_type=99, resource_name="x", pattern_type=99,
                                      principal="User:a", host="*", operation=99, permission_type=99)
    acl = replay_all(AclsDelta(AclsImage.EMPTY), [record]).apply().acls[ACL_ID]
    assert (acl.resource_type, acl.pattern_type, acl.operation, acl.permission_type) == (
        ResourceType.UNKNOWN, PatternType.UNKNOWN, AclOperation.UNKNOWN, AclPermissionType.UNKNOWN)


def test_finish_snapshot() -> None:
    delta = replay_all(AclsDelta(IMAGE1), [add(1), add(4)])
    delta.finish_snapshot()
    assert delta.apply() == AclsImage(dict([TEST_ACLS[1], TEST_ACLS[4]]))
    assert list(delta.changes)[:2] == [TEST_ACLS[1][0], TEST_ACLS[4][0]]  # replay order kept


def test_wrong_record_type() -> None:
    with pytest.raises(ReplayError, match="AclsDelta cannot replay NoOpRecord"):
        AclsDelta(IMAGE1).replay(NoOpRecord())


def test_structural_sharing() -> None:
    acls = {Uuid.random(): StandardAcl(ResourceType.TOPIC, f"t{i}", PatternType.LITERAL, "User:a", "*",
                                       AclOperation.READ, ALLOW) for i in range(300)}
    image = AclsImage(acls)
    victim = next(iter(acls))
    after = replay_all(AclsDelta(image), [remove(victim), add(0)]).apply()
    assert victim not in after.acls and len(after.acls) == 300
    assert all(after.acls[i] is a for i, a in acls.items() if i != victim)
    # re-adding the same ACL under its id changes nothing
    assert replay_all(AclsDelta(image), [acls[victim].to_record(victim)]).apply() is image
    assert AclsDelta(image).apply() is image
    assert "QZDDv-R7SyaPgetDPGd0Mw: StandardAcl(resourceType=CLUSTER" in repr(IMAGE1)
