"""ConfigurationsImage / ConfigurationsDelta: Kafka's ConfigurationsImageTest, topic deletion,
the controller writing the same bytes, and structural sharing."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.images import check_all_intermediate_images, image_records, replay_all

from kraft_node.metadata.configs.resources import ConfigResource, ConfigResourceType
from kraft_node.metadata.controller.configuration_control import ConfigurationControlManager
from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.configs import (
    ConfigurationDelta,
    ConfigurationImage,
    ConfigurationsDelta,
    ConfigurationsImage,
)
from kraft_storage.messages.metadata import ConfigRecord, TopicRecord
from kraft_storage.timeline import SnapshotRegistry

BROKER, TOPIC = ConfigResourceType.BROKER, ConfigResourceType.TOPIC
B0, B1, B2 = ConfigResource.broker("0"), ConfigResource.broker("1"), ConfigResource.broker("2")


def config(type_: ConfigResourceType, resource: str, name: str, value: str | None) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(ConfigRecord(resource_type=int(type_), resource_name=resource, name=name,
                                             value=value), 0)


def images(data: dict[ConfigResource, dict[str, str]]) -> ConfigurationsImage:
    return ConfigurationsImage({r: ConfigurationImage(r, d) for r, d in data.items()})


IMAGE1 = images({B0: {"foo": "bar", "baz": "quux"}, B1: {"foobar": "foobaz"}})
DELTA1_RECORDS = [
    config(BROKER, "0", "foo", None),         # remove configs
    config(BROKER, "0", "baz", None),
    config(BROKER, "1", "foobar", None),
    config(BROKER, "1", "barfoo", "bazfoo"),  # add a config to b1
    config(BROKER, "2", "foo", "bar"),        # add a config to b2
]
IMAGE2 = images({B1: {"barfoo": "bazfoo"}, B2: {"foo": "bar"}})


def check_to_image(image: ConfigurationsImage, records: list[ApiMessageAndVersion] | None = None) -> None:
    check_all_intermediate_images(ConfigurationsImage.EMPTY, ConfigurationsDelta, image,
                                  image_records(image) if records is None else records)


@pytest.mark.parametrize("image", [ConfigurationsImage.EMPTY, IMAGE1, IMAGE2], ids=["empty", "image1", "image2"])
def test_image_round_trip(image: ConfigurationsImage) -> None:
    check_to_image(image)


def test_apply_delta1() -> None:
    assert replay_all(ConfigurationsDelta(IMAGE1), DELTA1_RECORDS).apply() == IMAGE2
    check_to_image(IMAGE2, image_records(IMAGE1) + DELTA1_RECORDS)


def test_emptied_resource_disappears() -> None:
    after = replay_all(ConfigurationsDelta(IMAGE1), DELTA1_RECORDS[:2]).apply()
    assert B0 not in after.resource_data
    assert dict(after.config_map_for_resource(B0)) == {}
    assert after.config_properties(B0) == {}
    assert after.config_properties(B1) == {"foobar": "foobaz"}
    # deleting a key nobody set leaves no empty resource behind either
    assert replay_all(ConfigurationsDelta(IMAGE1), [config(TOPIC, "t", "x", None)]).apply() is IMAGE1


def test_write_order() -> None:
    """By resource type id, resource name, then key: the controller's snapshot order."""
    image = images({ConfigResource.topic("b"): {"z": "1", "a": "2"}, B1: {"k": "v"}, ConfigResource.topic("a"): {
        "m": "3"}, ConfigResource(ConfigResourceType.BROKER_LOGGER, "0"): {"root": "INFO"}})
    assert [(r.message.resource_type, r.message.resource_name, r.message.name, r.version)
            for r in image_records(image)] == [
        (2, "a", "m", 0), (2, "b", "a", 0), (2, "b", "z", 0), (4, "1", "k", 0), (8, "0", "root", 0)]


def test_same_records_as_the_controller() -> None:
    """Replayed into the controller's ConfigurationControlManager and into the image, the same records
    give byte-identical snapshots."""
    records = image_records(IMAGE1) + DELTA1_RECORDS + [
        config(TOPIC, "foo", "cleanup.policy", "compact"), config(TOPIC, "foo", "retention.ms", "1000"),
        config(BROKER, "", "log.retention.hours", "2"), config(ConfigResourceType.CLIENT_METRICS, "cm", "interval.ms",
                                                               "100")]
    manager = ConfigurationControlManager(SnapshotRegistry())
    for offset, r in enumerate(records):
        manager.replay(r.message, offset)
    image = replay_all(ConfigurationsDelta(ConfigurationsImage.EMPTY), records).apply()
    assert [r.encode() for r in image_records(image)] == [r.encode() for r in manager.snapshot_records()]


def test_delete_topic() -> None:
    foo, bar = ConfigResource.topic("foo"), ConfigResource.topic("bar")
    image = images({foo: {"retention.ms": "1"}, bar: {"retention.ms": "2"}, B0: {"x": "y"}})
    delta = replay_all(ConfigurationsDelta(image), [config(TOPIC, "foo", "cleanup.policy", "compact")])
    delta.delete_topic("foo")
    delta.delete_topic("unknown")  # a topic without configs: nothing to do
    after = delta.apply()
    assert after == images({bar: {"retention.ms": "2"}, B0: {"x": "y"}})
    assert after.resource_data[bar] is image.resource_data[bar]


def test_delete_topic_created_and_configured_in_the_same_delta() -> None:
    """Unlike Kafka's image (which only clears configs the image already had), the configs set in this
    delta go too: the final image must not depend on where the loader cut its deltas."""
    delta = replay_all(ConfigurationsDelta(ConfigurationsImage.EMPTY), [config(TOPIC, "new", "retention.ms", "5")])
    delta.delete_topic("new")
    assert delta.apply() == ConfigurationsImage.EMPTY
    # and a config set again after the deletion (a re-created topic) stays
    delta.replay(ConfigRecord(resource_type=2, resource_name="new", name="retention.ms", value="6"))
    assert delta.apply() == images({ConfigResource.topic("new"): {"retention.ms": "6"}})


def test_unknown_resource_type_reads_as_unknown() -> None:
    image = replay_all(ConfigurationsDelta(ConfigurationsImage.EMPTY), [config(BROKER, "0", "a", "b")]).apply()
    after = replay_all(ConfigurationsDelta(image), [
        ApiMessageAndVersion(ConfigRecord(resource_type=77, resource_name="x", name="k", value="v"), 0)]).apply()
    assert dict(after.config_map_for_resource(ConfigResource(ConfigResourceType.UNKNOWN, "x"))) == {"k": "v"}


def test_finish_snapshot() -> None:
    delta = replay_all(ConfigurationsDelta(IMAGE1), [config(BROKER, "0", "foo", "bar"), config(BROKER, "5", "a", "b")])
    delta.finish_snapshot()
    assert delta.apply() == images({B0: {"foo": "bar"}, ConfigResource.broker("5"): {"a": "b"}})


def test_wrong_record_type() -> None:
    with pytest.raises(ReplayError, match="ConfigurationsDelta cannot replay TopicRecord"):
        ConfigurationsDelta(IMAGE1).replay(TopicRecord(name="foo"))


def test_structural_sharing() -> None:
    image = images({ConfigResource.topic(f"t{i}"): {"retention.ms": str(i)} for i in range(500)})
    after = replay_all(ConfigurationsDelta(image), [config(TOPIC, "t7", "retention.ms", "77")]).apply()
    assert dict(after.config_map_for_resource(ConfigResource.topic("t7"))) == {"retention.ms": "77"}
    assert all(after.resource_data[r] is v for r, v in image.resource_data.items() if r.name != "t7")
    # setting a key to the value it has changes nothing
    assert replay_all(ConfigurationsDelta(image), [config(TOPIC, "t7", "retention.ms", "7")]).apply() is image
    assert ConfigurationsDelta(image).apply() is image


def test_values_stay_out_of_repr() -> None:
    image = images({B0: {"ssl.keystore.password": "secret"}})
    assert "secret" not in repr(image)
    delta = ConfigurationsDelta(image)
    delta.replay(ConfigRecord(resource_type=4, resource_name="0", name="sasl.jaas.config", value="hidden"))
    assert "hidden" not in repr(delta) and "sasl.jaas.config" in repr(delta)
    assert repr(ConfigurationDelta(image.resource_data[B0])) == (
        "ConfigurationDelta(ConfigResource(type=BROKER, name='0'), changed_keys=[])")


# -- a model check: random ConfigRecords and topic deletions, cut into deltas anywhere ------------

_OPS = st.lists(st.one_of(
    st.tuples(st.just("set"), st.sampled_from([TOPIC, BROKER]), st.sampled_from(["a", "b", "0"]),
              st.sampled_from(["k1", "k2"]), st.one_of(st.none(), st.sampled_from(["x", "y"]))),
    st.tuples(st.just("delete_topic"), st.sampled_from(["a", "b"]))), max_size=25)


def _replay_op(delta: ConfigurationsDelta, op: tuple) -> None:
    if op[0] == "set":
        _, type_, resource, name, value = op
        delta.replay(ConfigRecord(resource_type=int(type_), resource_name=resource, name=name, value=value))
    else:
        delta.delete_topic(op[1])


@settings(max_examples=150, deadline=None)
@given(_OPS, st.lists(st.integers(min_value=0, max_value=25), max_size=4))
def test_any_cut_gives_the_model(ops: list[tuple], cuts: list[int]) -> None:
    model: dict[ConfigResource, dict[str, str]] = {}
    for op in ops:
        if op[0] == "set":
            _, type_, resource, name, value = op
            configs = model.setdefault(ConfigResource(type_, resource), {})
            if value is None:
                configs.pop(name, None)
            else:
                configs[name] = value
            if not configs:
                del model[ConfigResource(type_, resource)]
        else:
            model.pop(ConfigResource.topic(op[1]), None)
    image = ConfigurationsImage.EMPTY
    bounds = sorted({0, len(ops), *(c for c in cuts if c <= len(ops))})
    for start, end in zip(bounds, bounds[1:]):
        delta = ConfigurationsDelta(image)
        for op in ops[start:end]:
            _replay_op(delta, op)
        image = delta.apply()
    assert image == images(model)
    assert all(not i.is_empty() for i in image.resource_data.values())
