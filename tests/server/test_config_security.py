"""No silently ignored settings (issue 19, Deliver 5 and the Why's item 3).

* Security settings kraft does not implement (SASL, authorizers, principals, non-PEM
  stores, ...) refuse the start with a one-line ConfigError naming the key; the
  issue's repro (CONTROLLER:SSL + ssl.* + sasl.* + authorizer.class.name, which
  started and served plaintext) is refused.
* A listener's protocol comes from ``listener.security.protocol.map`` with Kafka's
  default and Kafka's errors; ``listeners=SSL://...`` is TLS, never plaintext.
* Keys kraft does not read are warned about once at start in Kafka's words, with a
  "did you mean" for a near-miss of a Kafka config name (the issue's typo).
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from conftest import REPO
from support.config import cfg

from kraft_node.server.config import ConfigError, kafka_config_names, warn_unused_keys


@pytest.mark.parametrize("key,value", [
    ("sasl.enabled.mechanisms", "PLAIN"),
    ("sasl.jaas.config", "org.apache.kafka.common.security.plain.PlainLoginModule required;"),
    ("sasl.mechanism.controller.protocol", "PLAIN"),
    ("listener.name.controller.sasl.enabled.mechanisms", "SCRAM-SHA-512"),
    ("listener.name.controller.plain.sasl.jaas.config", "x required;"),
    ("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"),
    ("super.users", "User:admin"),
    ("principal.builder.class", "com.example.MyBuilder"),
    ("ssl.principal.mapping.rules", "RULE:^CN=(.*)$/$1/"),
    ("ssl.keystore.type", "JKS"),
    ("ssl.truststore.type", "PKCS12"),
    ("listener.name.controller.ssl.keystore.type", "JKS"),
    ("ssl.keystore.password", "changeit"),
    ("ssl.cipher.suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    ("delegation.token.secret.key", "k"),
])
def test_unimplemented_security_settings_refuse_the_start_naming_the_key(key, value):
    with pytest.raises(ConfigError) as ei:
        cfg(**{key: value})
    msg = str(ei.value)
    assert key in msg and "server.properties" in msg and "\n" not in msg


@pytest.mark.parametrize("key,value", [
    ("authorizer.class.name", ""), ("ssl.principal.mapping.rules", "DEFAULT"), ("ssl.keystore.type", "PEM"),
    ("ssl.truststore.type", "pem"), ("security.inter.broker.protocol", "PLAINTEXT"), ("super.users", ""),
])
def test_the_off_values_of_those_settings_are_accepted(key, value):
    assert cfg(**{key: value}).unused_keys() == []


def test_the_issue_repro_is_refused_instead_of_serving_plaintext():
    with pytest.raises(ConfigError, match="authorizer.class.name=.* is not supported"):
        cfg(**{"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.keystore.location": "/k.pem",
               "ssl.truststore.location": "/t.pem", "sasl.enabled.mechanisms": "PLAIN",
               "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    # without the SASL and authorizer keys, it is TLS or nothing: the missing keystore fails the start
    with pytest.raises(ConfigError, match="ssl.keystore.location: /k.pem: no such file"):
        cfg(**{"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.keystore.location": "/k.pem"})


def test_an_ssl_listener_name_is_tls_by_kafkas_default_map():
    with pytest.raises(ConfigError, match="SSL needs a keystore"):
        cfg(**{"listeners": "SSL://127.0.0.1:9093", "controller.listener.names": "SSL"})


@pytest.mark.parametrize("over,msg", [
    ({"listener.security.protocol.map": "CONTROLLER:SASL_SSL"}, "maps listener CONTROLLER to SASL_SSL"),
    ({"listener.security.protocol.map": "CONTROLLER:SASL_PLAINTEXT"}, "maps listener CONTROLLER to SASL_PLAINTEXT"),
    ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"},
     "Controller listener with name CONTROLLER defined in controller.listener.names not found in "
     "listener.security.protocol.map"),
    ({"listeners": "CONTROLLER://127.0.0.1:9093,TRACE://127.0.0.1:9094"}, "No security protocol defined for listener "
                                                                          "TRACE"),
    ({"listener.security.protocol.map": "CONTROLLER:TLS"}, "'TLS' is not a security protocol"),
    ({"listener.security.protocol.map": "CONTROLLER"}, "is not LISTENER_NAME:SECURITY_PROTOCOL"),
])
def test_protocol_map_errors_are_kafkas(over, msg):
    with pytest.raises(ConfigError, match=msg):
        cfg(**over)


def test_sasl_protocols_for_listeners_not_in_use_are_fine():
    c = cfg(**{"listener.security.protocol.map": "CONTROLLER:PLAINTEXT,EXTERNAL:SASL_SSL"})
    assert c.controller_security_protocol == "PLAINTEXT" and c.unused_keys() == []


# ------------------------------------------------------------------ unused keys
def test_kafkas_config_names_come_from_its_sources():
    names = kafka_config_names()
    assert len(names) > 300
    assert {"log.flush.interval.messages", "controller.quorum.voters", "ssl.keystore.location",
            "listener.security.protocol.map", "authorizer.class.name", "log.segment.bytes"} <= names


def test_the_issue_typo_is_listed_with_a_suggestion(caplog):
    c = cfg(**{"log.flush.interval.mesages": "1", "log.segment.bytes": "1048576", "num.io.threads": "8"})
    assert c.unused_keys() == ["log.flush.interval.mesages", "log.segment.bytes", "num.io.threads"]
    with caplog.at_level(logging.WARNING, logger="kraft.config"):
        lines = warn_unused_keys(c)
    assert lines[0] == ("These configurations '[log.flush.interval.mesages, log.segment.bytes, num.io.threads]' "
                        "were supplied but are not used yet.")
    assert lines[1:] == ["server.properties: 'log.flush.interval.mesages' is not a Kafka config; "
                         "did you mean 'log.flush.interval.messages'?"]
    assert [r.getMessage() for r in caplog.records] == lines
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_keys_kraft_reads_are_not_listed():
    c = cfg(**{"controller.quorum.election.timeout.ms": "500", "metadata.log.dir": "/m",
               "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"})
    assert c.unused_keys() == [] and c.unused_key_warnings() == []


def test_ssl_keys_are_unused_without_an_ssl_listener():
    c = cfg(**{"ssl.truststore.location": "/t.pem", "ssl.client.auth": "required"})
    assert c.unused_keys() == ["ssl.client.auth", "ssl.truststore.location"]


def test_listener_prefixed_ssl_keys_of_other_listeners_are_unused(tmp_path):
    from support.pki import Pki
    pki = Pki(str(tmp_path))
    ks = pki.keystore("n1")[0]
    c = cfg(**{"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.keystore.location": ks,
               "listener.name.controller.ssl.client.auth": "none",
               "listener.name.external.ssl.client.auth": "required"})
    assert c.unused_keys() == ["listener.name.external.ssl.client.auth"]


def test_the_server_logs_the_warning_once_at_start(tmp_path):
    """kraft-server-start with a typo in its config: one warning listing it, with the suggestion."""
    from support.raft import cluster_properties
    path = cluster_properties(str(tmp_path), 1, extra={"log.flush.interval.mesages": "1"})[0]
    repo = str(REPO)
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "kraft_node.server.start", path, "--exit-after-seconds", "0.5"],
                       capture_output=True, text=True, timeout=60, env=env, cwd=repo)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("These configurations '[log.flush.interval.mesages]' were supplied but are not "
                          "used yet.") == 1
    assert p.stderr.count("did you mean 'log.flush.interval.messages'?") == 1
