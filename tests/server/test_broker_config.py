"""The broker role's config: Kafka's listener rules (KafkaConfig.validateValues) and messages, its keys."""
from __future__ import annotations

import pytest

from kraft_node.raft.messages import Endpoint
from kraft_node.server.config import BrokerSettings, ConfigError, NodeConfig

BASE = {
    "process.roles": "broker",
    "node.id": "4",
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "controller.listener.names": "CONTROLLER",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "log.dirs": "/nonexistent/kraft-broker-4",
}


def config(**over: str) -> NodeConfig:
    props = dict(BASE)
    for k, v in over.items():
        key = k.replace("_", ".")
        if v is None:
            props.pop(key, None)
        else:
            props[key] = v
    return NodeConfig.from_properties(props, "b.properties")


def test_a_broker_only_node_advertises_its_listeners_and_uses_plaintext_between_brokers():
    cfg = config()
    assert cfg.is_broker and not cfg.is_controller and cfg.controller_endpoint is None
    assert cfg.broker_listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 9092)]
    assert cfg.advertised_listeners == cfg.broker_listeners
    assert cfg.inter_broker_listener_name == "PLAINTEXT"
    assert cfg.broker_settings == BrokerSettings()
    assert cfg.unused_keys() == []


def test_the_embedded_default_is_a_combined_node_on_kafkas_ports():
    cfg = NodeConfig.default()
    assert cfg.roles == {"broker", "controller"}
    assert cfg.broker_listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 9092)]
    assert cfg.controller_endpoint == Endpoint("CONTROLLER", "127.0.0.1", 9093)
    assert cfg.advertised_listeners == cfg.broker_listeners  # never the controller listener


def test_advertised_listeners_and_the_broker_keys_are_read():
    cfg = config(listeners="INTERNAL://127.0.0.1:0,EXTERNAL://0.0.0.0:9092",
                 **{"advertised.listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://broker4.example:19092",
                    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "inter.broker.listener.name": "internal", "broker.rack": "rack-a",
                    "auto.create.topics.enable": "FALSE", "controlled.shutdown.enable": "true",
                    "initial.broker.registration.timeout.ms": "5000"})
    assert cfg.advertised_listeners == [Endpoint("INTERNAL", "127.0.0.1", 0),
                                        Endpoint("EXTERNAL", "broker4.example", 19092)]
    assert cfg.inter_broker_listener_name == "INTERNAL"
    assert cfg.broker_settings == BrokerSettings(rack="rack-a", auto_create_topics_enable=False,
                                                 controlled_shutdown_enable=True, initial_registration_timeout_ms=5000)
    assert cfg.unused_keys() == []


@pytest.mark.parametrize("over, message", [
    ({"listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"},
     "controller.listener.names must not contain a value appearing in the 'listeners' configuration when running "
     "KRaft with just the broker role"),
    ({"node.id": "1"}, "process.roles=broker but node.id 1 is listed in controller.quorum.voters"),
    ({"inter.broker.listener.name": "INTERNAL"},
     "Listener with name INTERNAL defined in inter.broker.listener.name not found in listener.security.protocol.map."),
    ({"listeners": "INTERNAL://127.0.0.1:9092",
      "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT"},
     "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid options based "
     "on currently configured listeners are INTERNAL"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."),
    ({"security.inter.broker.protocol": "TLS"},
     "Invalid security protocol `TLS` defined in security.inter.broker.protocol"),
    ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
     "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a routable IP address."),
    ({"advertised.listeners": "PLAINTEXT://127.0.0.1:9092,OTHER://127.0.0.1:9094",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT,CONTROLLER:PLAINTEXT"},
     "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners. "
     "Found PLAINTEXT,OTHER."),
    ({"advertised.listeners": "PLAINTEXT:/x"}, "advertised.listeners: 'PLAINTEXT:/x' is not NAME://host:port"),
    ({"auto.create.topics.enable": "yes"},
     "auto.create.topics.enable: Expected value to be either true or false, not 'yes'"),
    ({"initial.broker.registration.timeout.ms": "0"},
     "Invalid value 0 for configuration initial.broker.registration.timeout.ms: Value must be at least 1"),
])
def test_broker_config_errors_name_the_key_with_kafkas_words(over, message):
    props = dict(BASE, **over)
    with pytest.raises(ConfigError) as ei:
        NodeConfig.from_properties(props, "b.properties")
    assert message in str(ei.value) and str(ei.value).startswith("b.properties: ")


def test_a_combined_node_never_advertises_its_controller_listener_to_clients():
    props = dict(BASE, **{"process.roles": "broker,controller", "node.id": "1",
                          "listeners": "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"})
    cfg = NodeConfig.from_properties(props, "c.properties")
    assert cfg.advertised_listeners == [Endpoint("PLAINTEXT", "127.0.0.1", 9092)]
    props["listeners"] = "CONTROLLER://127.0.0.1:9093"
    with pytest.raises(ConfigError, match="There must be at least one broker advertised listener. Perhaps all "
                                          "listeners appear in controller.listener.names?"):
        NodeConfig.from_properties(props, "c.properties")


def test_a_controller_only_node_has_no_broker_side():
    props = dict(BASE, **{"process.roles": "controller", "node.id": "1", "listeners": "CONTROLLER://127.0.0.1:9093"})
    cfg = NodeConfig.from_properties(props, "c.properties")
    assert not cfg.is_broker and cfg.broker_listeners == [] and cfg.advertised_listeners == []
    assert cfg.inter_broker_listener_name is None


def test_partition_and_replica_fetcher_keys_are_used_by_brokers_only():
    """The partitions' keys (log.segment.bytes, replica.fetch.*, ...) are read by a broker; a
    controller-only node lists them as supplied but not used."""
    props = {"log.segment.bytes": "1048576", "replica.fetch.max.bytes": "2097152", "min.insync.replicas": "2"}
    assert config(**{k.replace(".", "_"): v for k, v in props.items()}).unused_keys() == []
    controller = dict(BASE, **props, **{"process.roles": "controller", "listeners": "CONTROLLER://127.0.0.1:9093",
                                        "controller.quorum.voters": "4@127.0.0.1:9093"})
    assert NodeConfig.from_properties(controller, "c.properties").unused_keys() == sorted(props)


def test_replica_fetcher_settings_are_checked_when_the_config_is_read():
    with pytest.raises(ConfigError, match=r"^b.properties: replica.fetch.wait.max.ms should always be less than or "
                                          r"equal to replica.lag.time.max.ms"):
        config(replica_fetch_wait_max_ms="40000", replica_socket_timeout_ms="50000")


def test_kip392_selector_and_fetch_session_slots_are_checked_when_the_config_is_read():
    ok = config(**{"replica_selector_class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
                   "max_incremental_fetch_session_cache_slots": "10"})
    assert ok.unused_keys() == []
    with pytest.raises(ConfigError, match=r"^b.properties: replica.selector.class='com.example.Mine' is not supported"):
        config(replica_selector_class="com.example.Mine")
    with pytest.raises(ConfigError,
                       match=r"^b.properties: max.incremental.fetch.session.cache.slots='x' is not an int"):
        config(max_incremental_fetch_session_cache_slots="x")
