"""server.properties parsing with Kafka's key names; clear errors naming key and file."""
import pytest

from kraft_node.server.config import ConfigError, NodeConfig, parse_voters
from kraft_storage.meta_properties import parse_properties

BASE = """
process.roles=controller
node.id=2
controller.quorum.voters=1@127.0.0.1:9001,2@127.0.0.1:9002,3@localhost:9003
listeners=CONTROLLER://127.0.0.1:9002
controller.listener.names=CONTROLLER
log.dirs=/data/a,/data/b
controller.quorum.election.timeout.ms=500
"""


def cfg(text=BASE, **over):
    props = parse_properties(text)
    props.update({k.replace("_", "."): v for k, v in over.items()})
    for k in [k for k, v in props.items() if v is None]:
        del props[k]
    return NodeConfig.from_properties(props, "server.properties")


def test_parses_kafka_keys():
    c = cfg()
    assert c.node_id == 2 and c.is_controller
    assert [(v.id, v.host, v.port) for v in c.voters] == [(1, "127.0.0.1", 9001), (2, "127.0.0.1", 9002),
                                                          (3, "localhost", 9003)]
    assert str(c.controller_endpoint) == "CONTROLLER://127.0.0.1:9002"
    assert c.metadata_log_dir == "/data/a" and c.metadata_partition_dir == "/data/a/__cluster_metadata-0"
    assert c.quorum.election_timeout_ms == 500 and c.quorum.fetch_timeout_ms == 2000


def test_dynamic_voter_syntax():
    (v,) = parse_voters("3@host:9093:Teb3PFb009qvAZgMDEFH4g")
    assert (v.id, v.host, v.port, v.directory_id) == (3, "host", 9093, "Teb3PFb009qvAZgMDEFH4g")


@pytest.mark.parametrize("over,msg", [
    ({"node.id": None}, "missing required key node.id"),
    ({"node.id": "x"}, "node.id: 'x' is not a number"),
    ({"process.roles": "zk"}, "process.roles"),
    ({"controller.quorum.voters": "1@nohostport"}, "is not host:port"),
    ({"controller.quorum.voters": "a@h:1"}, "voter id 'a' is not a number"),
    ({"controller.quorum.voters": "1@h:1,1@h:2"}, "duplicate voter ids"),
    ({"controller.quorum.voters": None}, "controller.quorum.voters or controller.quorum.bootstrap.servers"),
    ({"controller.quorum.bootstrap.servers": "h:1"}, "not both"),
    ({"listeners": "CONTROLLER://127.0.0.1:9999"}, "port 9002 but its controller listener"),
    ({"controller.listener.names": "OTHER"}, "names no entry of listeners"),
    ({"log.dirs": None}, "missing required key log.dirs"),
    ({"controller.quorum.election.timeout.ms": "soon"}, "server.properties"),
    ({"controller.quorum.bogus.ms": "1"}, "unknown quorum config"),
    ({"controller.quorum.election.timeout.ms": "0"}, "election.timeout.ms=0 is out of range"),
    ({"controller.quorum.fetch.timeout.ms": "-5"}, "fetch.timeout.ms=-5 is out of range"),
    ({"controller.quorum.request.timeout.ms": "0"}, "request.timeout.ms=0 is out of range"),
    ({"controller.quorum.append.linger.ms": "-1"}, "append.linger.ms=-1 is out of range"),
    ({"controller.quorum.fetch.timeout.ms": "9" * 20}, "fetch.timeout.ms=9+ is out of range"),
    ({"controller.quorum.retry.backoff.ms": "abc"}, "retry.backoff.ms='abc' is not an integer"),
    ({"process.roles": "broker"}, "node.id 2 is listed in controller.quorum.voters"),
])
def test_errors_name_the_key_and_file(over, msg):
    with pytest.raises(ConfigError, match=msg) as ei:
        cfg(**{k.replace(".", "_"): v for k, v in over.items()})
    assert "server.properties" in str(ei.value)


def test_zero_linger_and_backoff_are_accepted():
    c = cfg(controller_quorum_append_linger_ms="0", controller_quorum_retry_backoff_ms="0")
    assert c.quorum.append_linger_ms == 0 and c.quorum.retry_backoff_ms == 0


def test_embedded_default_is_valid():
    c = NodeConfig.default()
    assert c.is_controller and c.voters[0].id == c.node_id == 1


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="No such file"):
        NodeConfig.from_file(str(tmp_path / "nope.properties"))


@pytest.mark.parametrize("argv,env,msg", [
    (["--log-level", "bogus"], {}, "--log-level (or KRAFT_LOG_LEVEL) 'bogus' is not one of"),
    ([], {"KRAFT_EXIT_AFTER_SECONDS": "xyz"}, "KRAFT_EXIT_AFTER_SECONDS='xyz' is not a number"),
    (["--exit-after-seconds", "-1"], {}, "--exit-after-seconds must be"),
    (["--writer-interval-ms", "0"], {}, "--writer-interval-ms and --writer-batch must be at least 1"),
])
def test_server_command_line_errors_are_usage_errors(argv, env, msg, monkeypatch, capsys):
    """kraft-server-start refuses bad options with a usage error (exit 2) naming them,
    before it formats or starts anything -- not with a traceback."""
    from kraft_node.server import start as server
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as ei:
        server.main(argv)
    assert ei.value.code == 2
    assert msg in capsys.readouterr().err


# ------------------------------------------------------------------ controller settings (issue 21)
def test_controller_settings_default_to_kafkas():
    s = cfg().controller_settings
    assert (s.broker_session_timeout_ms, s.broker_heartbeat_interval_ms, s.metadata_max_idle_interval_ms) == \
        (9000, 2000, 500)
    assert s.metadata_log_max_record_bytes_between_snapshots == 20971520
    assert s.metadata_log_max_snapshot_interval_ms == 3600000
    assert (s.metadata_max_retention_bytes, s.metadata_max_retention_ms) == (104857600, 604800000)
    assert s.leader_imbalance_check_interval_seconds == 300 and s.leader_imbalance_check_interval_ms == 300_000
    assert (s.num_partitions, s.default_replication_factor) == (1, 1)
    assert (s.controller_performance_sample_period_ms, s.controller_performance_always_log_threshold_ms) == \
        (60000, 2000)
    assert s.max_idle_interval_ms == 500 and s.warnings() == []
    assert cfg().metrics_listener is None


def test_controller_settings_are_parsed_and_frozen():
    import dataclasses
    c = cfg(**{"broker.session.timeout.ms": "18000", "broker.heartbeat.interval.ms": " 1000 ",
               "metadata.max.idle.interval.ms": "0", "metadata.log.max.record.bytes.between.snapshots": "4096",
               "metadata.log.max.snapshot.interval.ms": "0", "metadata.max.retention.bytes": "-1",
               "metadata.max.retention.ms": "-1", "leader.imbalance.check.interval.seconds": "10",
               "num.partitions": "3", "default.replication.factor": "+3",
               "controller.performance.sample.period.ms": "100",
               "controller.performance.always.log.threshold.ms": "0"})
    s = c.controller_settings
    assert (s.broker_session_timeout_ms, s.broker_heartbeat_interval_ms) == (18000, 1000)
    assert s.metadata_max_idle_interval_ms == 0 and s.max_idle_interval_ms is None  # 0: no no-op writer
    assert s.metadata_log_max_record_bytes_between_snapshots == 4096
    assert s.metadata_log_max_snapshot_interval_ms == 0
    assert (s.metadata_max_retention_bytes, s.metadata_max_retention_ms) == (-1, -1)  # no limit, as in Kafka
    assert (s.leader_imbalance_check_interval_seconds, s.num_partitions, s.default_replication_factor) == (10, 3, 3)
    assert (s.controller_performance_sample_period_ms, s.controller_performance_always_log_threshold_ms) == (100, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.num_partitions = 5
    # the keys are read, so they are not reported as unused
    assert c.unused_keys() == []


def test_long_keys_take_values_beyond_int():
    big = str(2 ** 40)
    s = cfg(**{"metadata.log.max.record.bytes.between.snapshots": big}).controller_settings
    assert s.metadata_log_max_record_bytes_between_snapshots == 2 ** 40


@pytest.mark.parametrize("key,value,msg", [
    ("num.partitions", "0", "Invalid value 0 for configuration num.partitions: Value must be at least 1"),
    ("num.partitions", "abc", "Invalid value abc for configuration num.partitions: Not a number of type INT"),
    ("num.partitions", "1_000", "Invalid value 1_000 for configuration num.partitions: Not a number of type INT"),
    ("num.partitions", "2147483648", "configuration num.partitions: Not a number of type INT"),
    ("broker.session.timeout.ms", "0", "configuration broker.session.timeout.ms: Value must be at least 1"),
    ("broker.heartbeat.interval.ms", "-5", "configuration broker.heartbeat.interval.ms: Value must be at least 1"),
    ("metadata.max.idle.interval.ms", "-1", "configuration metadata.max.idle.interval.ms: Value must be at least 0"),
    ("metadata.log.max.record.bytes.between.snapshots", "0",
     "configuration metadata.log.max.record.bytes.between.snapshots: Value must be at least 1"),
    ("metadata.log.max.snapshot.interval.ms", "-1",
     "configuration metadata.log.max.snapshot.interval.ms: Value must be at least 0"),
    ("metadata.max.retention.bytes", "9" * 20, "configuration metadata.max.retention.bytes: Not a number of type LONG"),
    ("metadata.max.retention.ms", "1.5", "configuration metadata.max.retention.ms: Not a number of type LONG"),
    ("leader.imbalance.check.interval.seconds", "0",
     "configuration leader.imbalance.check.interval.seconds: Value must be at least 1"),
    ("default.replication.factor", "0", "configuration default.replication.factor: Value must be at least 1"),
    ("default.replication.factor", "40000",
     "configuration default.replication.factor: Value must be no more than 32767"),
    ("controller.performance.sample.period.ms", "99",
     "configuration controller.performance.sample.period.ms: Value must be at least 100"),
    ("controller.performance.always.log.threshold.ms", "-1",
     "configuration controller.performance.always.log.threshold.ms: Value must be at least 0"),
    ("kraft.metrics.listener", "9100", "kraft.metrics.listener: '9100' is not host:port"),
    ("kraft.metrics.listener", "localhost:70000", "kraft.metrics.listener: 'localhost:70000' is not host:port"),
])
def test_controller_setting_errors_name_the_key_and_file(key, value, msg):
    with pytest.raises(ConfigError) as ei:
        cfg(**{key.replace(".", "_"): value})
    assert msg in str(ei.value) and str(ei.value).startswith("server.properties: ")


def test_heartbeat_interval_must_be_below_the_session_timeout():
    with pytest.raises(ConfigError, match=r"server.properties: broker.heartbeat.interval.ms \(9000\) must be less "
                                          r"than broker.session.timeout.ms \(9000\)"):
        cfg(broker_heartbeat_interval_ms="9000")
    with pytest.raises(ConfigError, match=r"broker.heartbeat.interval.ms \(2000\) must be less than "
                                          r"broker.session.timeout.ms \(1500\)"):
        cfg(broker_session_timeout_ms="1500")


def test_heartbeat_interval_over_half_the_session_timeout_is_logged_at_error(caplog):
    import logging
    with caplog.at_level(logging.ERROR, logger="kraft.config"):
        c = cfg(broker_heartbeat_interval_ms="5000")
    assert c.controller_settings.broker_heartbeat_interval_ms == 5000  # accepted, as Kafka does
    (rec,) = [r for r in caplog.records if r.name == "kraft.config"]
    assert rec.levelno == logging.ERROR
    assert rec.getMessage().startswith("server.properties: broker.heartbeat.interval.ms (5000 ms) must be less "
                                       "than or equal to half of the broker.session.timeout.ms (9000 ms)")
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="kraft.config"):
        cfg(broker_heartbeat_interval_ms="4500")  # exactly half: fine
    assert caplog.records == []


@pytest.mark.parametrize("value,expected", [("127.0.0.1:9100", ("127.0.0.1", 9100)), ("[::1]:0", ("::1", 0)),
                                            ("", None), ("  ", None)])
def test_metrics_listener(value, expected):
    c = cfg(kraft_metrics_listener=value)
    assert c.metrics_listener == expected
    assert c.unused_keys() == []  # kraft's own key, read: never "supplied but not used"


def test_retention_keys_set_explicitly_are_warned_about_by_name(caplog):
    # kraft deletes the log up to each snapshot instead of Kafka's retention policy: a user who
    # set a retention key is told, naming it (nothing silent)
    with caplog.at_level("ERROR", logger="kraft.config"):
        c = cfg(**{"metadata.max.retention.bytes": "1073741824"})
    assert c.controller_settings.retention_keys_set == {"metadata.max.retention.bytes"}
    assert any("metadata.max.retention.bytes is not applied as Kafka applies it" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level("ERROR", logger="kraft.config"):
        cfg()
    assert not [r for r in caplog.records if "retention" in r.message]
