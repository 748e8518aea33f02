"""TLS on listeners (issue 19, Deliver 4): Kafka's SSL protocol with PEM stores.

Certificates are made at test time (``cryptography``): a CA, node certificates for
127.0.0.1/localhost signed by it, a second CA that nobody trusts, and a certificate
for another host name.  Checked: a mutual-TLS 3-voter quorum elects and commits and
answers ``kraft-metadata-quorum --command-config``; plaintext is refused on an SSL
port; a wrong CA is refused in both directions; ``ssl.client.auth=required`` refuses
a client without a certificate; host names are verified unless
``ssl.endpoint.identification.algorithm`` is empty; kafka-python connects with
``security_protocol="SSL"`` and fails in plaintext; inline PEM keys work; non-PEM
stores are refused naming the key.
"""
from __future__ import annotations

import asyncio
import time

import pytest
from support.config import cfg as _cfg
from support.pki import Pki
from support.raft import cluster_properties

from kraft_node.network import ConnectFailed, ConnectionClosed, KafkaConnection, KafkaServer
from kraft_node.network.tls import client_context, server_context
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from kraft_node.server.config import ConfigError, NodeConfig
from kraft_node.server.node import KraftNode
from kraft_node.server.tools import metadata_quorum
from kraft_storage.meta_properties import parse_properties


@pytest.fixture
def pki(tmp_path):
    return Pki(str(tmp_path))


def run(coro, timeout=60, loop="asyncio"):
    if loop == "uvloop":
        import uvloop
        return uvloop.run(asyncio.wait_for(coro, timeout))
    return asyncio.run(asyncio.wait_for(coro, timeout))


try:  # kraft-server-start runs on uvloop when it is installed (kraft_node.event_loop): check both loops
    import uvloop  # noqa: F401
    LOOPS = ["asyncio", "uvloop"]
except ImportError:
    LOOPS = ["asyncio"]


def _describe_handler(ctx, req):
    return DescribeClusterResponse(cluster_id="tls", controller_id=1, error_code=0)


async def _tls_server(props, listener="CONTROLLER"):
    s = KafkaServer("127.0.0.1", 0, {ApiKeys.DESCRIBE_CLUSTER: _describe_handler}, listener=listener,
                    listener_type="controller", ssl_context=server_context(props, listener, "test"))
    await s.start()
    return s


async def _ask(port, ctx, timeout=3.0):
    """One DescribeCluster round trip; returns the cluster id, or raises."""
    c = await KafkaConnection.open("127.0.0.1", port, timeout=timeout, ssl_context=ctx)
    try:
        return (await c.request(DescribeClusterRequest(), 1, timeout=timeout)).cluster_id
    finally:
        await c.close()


# ------------------------------------------------------------------ the quorum
def test_mutual_tls_three_voter_quorum_elects_commits_and_answers_the_cli(tmp_path, pki, capsys):
    paths = cluster_properties(str(tmp_path), 3)
    for i, p in enumerate(paths):
        ks, _, _ = pki.keystore(f"node{i + 1}")
        with open(p, "a") as f:
            f.write("listener.security.protocol.map=CONTROLLER:SSL\n"
                    f"ssl.keystore.type=PEM\nssl.keystore.location={ks}\n"
                    f"ssl.truststore.type=PEM\nssl.truststore.location={pki.cafile}\n"
                    "ssl.client.auth=required\n")
    cli_ks, _, _ = pki.keystore("admin")
    command_config = str(tmp_path / "admin.properties")
    with open(command_config, "w") as f:
        f.write(f"security.protocol=SSL\nssl.truststore.location={pki.cafile}\nssl.keystore.location={cli_ks}\n")

    async def go():
        ns = [KraftNode.from_config(NodeConfig.from_file(p)) for p in paths]
        ds = [n.driver for n in ns]
        try:
            for n in ns:
                await n.start()
            deadline = time.monotonic() + 15
            while not any(d.is_leader for d in ds):
                assert time.monotonic() < deadline, "no leader elected over TLS"
                await asyncio.sleep(0.02)
            leader = next(d for d in ds if d.is_leader)
            ep = leader.leader_and_epoch.epoch
            offs = await asyncio.gather(*[leader.append([b"tls%d" % i], ep) for i in range(20)])
            assert len(set(offs)) == 20
            deadline = time.monotonic() + 10
            while min(d.core.high_watermark or 0 for d in ds) <= max(offs):
                assert time.monotonic() < deadline, [d.core.high_watermark for d in ds]
                await asyncio.sleep(0.02)
            port = ns[0].port
            # the CLI with --command-config speaks TLS with a client certificate
            rc = await asyncio.to_thread(metadata_quorum.main, ["--bootstrap-controller", f"127.0.0.1:{port}",
                                                                "--command-config", command_config,
                                                                "describe", "--status"])
            assert rc == 0
            # ...and without it the SSL port does not answer plaintext
            rc = await asyncio.to_thread(metadata_quorum.main, ["--bootstrap-controller", f"127.0.0.1:{port}",
                                                                "--timeout", "2", "describe", "--status"])
            assert rc == 1
        finally:
            for n in ns:
                await n.shutdown(2)

    run(go(), timeout=90)
    out = capsys.readouterr()
    assert "LeaderId:" in out.out and "CurrentVoters:" in out.out
    assert "kraft-metadata-quorum:" in out.err


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize("loop", LOOPS)
def test_plaintext_client_is_refused_on_an_ssl_port(pki, loop):
    """(A per-connection ``loop.start_tls`` from ``connection_made``, tried to log failed
    handshakes, let plaintext through on uvloop: this guards the listener on both loops.)"""
    ks, _, _ = pki.keystore("srv")

    async def go():
        s = await _tls_server({"ssl.keystore.location": ks})
        try:
            assert await _ask(s.port, client_context({"ssl.truststore.location": pki.cafile})) == "tls"
            with pytest.raises((ConnectionClosed, TimeoutError)):
                await _ask(s.port, None, timeout=2)
        finally:
            await s.close()
    run(go(), loop=loop)


def test_a_server_certificate_from_a_wrong_ca_is_refused(pki):
    ks, _, _ = pki.keystore("srv", stranger=True)

    async def go():
        s = await _tls_server({"ssl.keystore.location": ks})
        try:
            with pytest.raises(ConnectFailed, match=r"127\.0\.0\.1:\d+: TLS handshake failed.*certificate") as ei:
                await _ask(s.port, client_context({"ssl.truststore.location": pki.cafile}))
            assert ei.value.reason == "tls"
        finally:
            await s.close()
    run(go())


@pytest.mark.parametrize("client_cert", ["stranger", "none"])
def test_client_auth_required_refuses_a_client_certificate_from_a_wrong_ca_or_none(pki, client_cert):
    ks, _, _ = pki.keystore("srv")
    props = {"ssl.keystore.location": ks, "ssl.truststore.location": pki.cafile, "ssl.client.auth": "required"}
    cprops = {"ssl.truststore.location": pki.cafile}
    if client_cert == "stranger":
        cprops["ssl.keystore.location"] = pki.keystore("cli", stranger=True)[0]

    async def go():
        s = await _tls_server(props)
        try:
            good = dict(cprops, **{"ssl.keystore.location": pki.keystore("good")[0]})
            assert await _ask(s.port, client_context(good)) == "tls"
            # TLS 1.3: the client may finish its handshake before the server refuses it; the
            # refusal then arrives as an alert on the first read
            with pytest.raises((ConnectionClosed, TimeoutError)):
                await _ask(s.port, client_context(cprops), timeout=2)
        finally:
            await s.close()
    run(go())


def test_client_auth_requested_accepts_a_client_without_a_certificate(pki):
    ks, _, _ = pki.keystore("srv")

    async def go():
        s = await _tls_server({"ssl.keystore.location": ks, "ssl.truststore.location": pki.cafile,
                               "ssl.client.auth": "requested"})
        try:
            assert await _ask(s.port, client_context({"ssl.truststore.location": pki.cafile})) == "tls"
        finally:
            await s.close()
    run(go())


def test_host_name_verification_refuses_a_certificate_for_another_name_unless_disabled(pki):
    ks, _, _ = pki.keystore("srv", sans=("other.example",))

    async def go():
        s = await _tls_server({"ssl.keystore.location": ks})
        try:
            with pytest.raises(ConnectFailed, match="TLS handshake failed.*(mismatch|match)"):
                await _ask(s.port, client_context({"ssl.truststore.location": pki.cafile}))
            off = client_context({"ssl.truststore.location": pki.cafile,
                                  "ssl.endpoint.identification.algorithm": ""})
            assert await _ask(s.port, off) == "tls"
        finally:
            await s.close()
    run(go())


def test_inline_pem_keystore_and_truststore_with_an_encrypted_key(pki):
    """``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` (+ ``ssl.key.password``) and
    ``ssl.truststore.certificates``, written in a properties file the way Kafka's docs do:
    one logical line per value, continued with backslashes."""
    _, key_pem, chain = pki.keystore("srv", password="s3cret")

    def as_property(pem):
        return " \\\n    ".join(pem.strip().splitlines())
    text = (f"ssl.keystore.type=PEM\nssl.keystore.key={as_property(key_pem)}\n"
            f"ssl.keystore.certificate.chain={as_property(chain)}\nssl.key.password=s3cret\n"
            f"ssl.truststore.type=PEM\nssl.truststore.certificates={as_property(open(pki.cafile).read())}\n")
    props = parse_properties(text)
    assert "\n" not in props["ssl.keystore.key"]

    async def go():
        s = await _tls_server(props)
        try:
            assert await _ask(s.port, client_context(props)) == "tls"
        finally:
            await s.close()
    run(go())
    with pytest.raises(ValueError, match="ssl.key.password is wrong"):
        server_context(dict(props, **{"ssl.key.password": "nope"}), "CONTROLLER", "test")


def test_listener_prefixed_keys_override_the_plain_ones(pki):
    good, _, _ = pki.keystore("srv")
    props = {"ssl.keystore.location": "/nonexistent.pem",
             "listener.name.controller.ssl.keystore.location": good,
             "listener.name.controller.ssl.client.auth": "required",
             "ssl.truststore.location": pki.cafile}

    async def go():
        s = await _tls_server(props)
        try:
            with pytest.raises((ConnectionClosed, TimeoutError)):  # client auth required by the prefixed key
                await _ask(s.port, client_context({"ssl.truststore.location": pki.cafile}), timeout=2)
        finally:
            await s.close()
    run(go())
    with pytest.raises(ValueError, match="ssl.keystore.location: /nonexistent.pem: no such file"):
        server_context(props, "OTHER", "test")


# ------------------------------------------------------------------ kafka-python
def _kafka_python_api_versions(port, **ssl):
    from kafka.net.compat import KafkaNetClient
    c = KafkaNetClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=3000,
                       socket_connection_setup_timeout_ms=3000, reconnect_backoff_ms=50, **ssl)
    try:
        node = c._manager.cluster.bootstrap_brokers()[0].node_id
        c.await_ready(node, timeout_ms=3000)  # connect, (TLS handshake,) ApiVersions
        return c._manager._conns[node].broker_version
    finally:
        c.close()


def test_kafka_python_connects_with_ssl_and_fails_in_plaintext(pki):
    ks, key_pem, chain = pki.keystore("srv")
    cli = pki.keystore("kp")[0]

    async def go():
        s = await _tls_server({"ssl.keystore.location": ks, "ssl.truststore.location": pki.cafile,
                               "ssl.client.auth": "required"})
        try:
            v = await asyncio.to_thread(_kafka_python_api_versions, s.port, security_protocol="SSL",
                                        ssl_cafile=pki.cafile, ssl_certfile=cli, ssl_keyfile=cli)
            assert v is not None  # ApiVersions answered over TLS
            from kafka.errors import KafkaConnectionError
            # a PLAINTEXT client never gets its ApiVersions answer from the TLS listener
            with pytest.raises(KafkaConnectionError):
                await asyncio.to_thread(_kafka_python_api_versions, s.port, security_protocol="PLAINTEXT")
        finally:
            await s.close()
    run(go())


# ------------------------------------------------------------------ configuration


def test_the_controller_listener_protocol_comes_from_the_map(pki):
    ks, _, _ = pki.keystore("n1")
    c = _cfg(**{"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.keystore.location": ks,
                "ssl.truststore.location": pki.cafile})
    assert c.controller_security_protocol == "SSL"
    assert c.server_ssl_context("CONTROLLER") is not None and c.client_ssl_context() is not None
    assert _cfg().controller_security_protocol == "PLAINTEXT" and _cfg().client_ssl_context() is None


@pytest.mark.parametrize("over,msg", [
    ({"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.keystore.type": "JKS",
      "ssl.keystore.location": "/x.jks"}, "ssl.keystore.type=JKS is not supported"),
    ({"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.truststore.type": "PKCS12"},
     "ssl.truststore.type=PKCS12 is not supported"),
    ({"listener.security.protocol.map": "CONTROLLER:SSL"}, "needs a keystore: set ssl.keystore.location"),
    ({"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.keystore.location": "/nope.pem"},
     "ssl.keystore.location: /nope.pem: no such file"),
    ({"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.keystore.location": "KS",
      "ssl.client.auth": "always"}, "ssl.client.auth='always' must be none, requested or required"),
    ({"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.keystore.location": "KS",
      "ssl.endpoint.identification.algorithm": "ldap"}, "ssl.endpoint.identification.algorithm='ldap'"),
    ({"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.keystore.location": "KS",
      "ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols='TLSv1.1'"),
    ({"listener.security.protocol.map": "CONTROLLER:SSL", "ssl.keystore.location": "NOTPEM"},
     "ssl.keystore.location: .* is not a PEM private key"),
])
def test_tls_config_errors_name_the_key(pki, over, msg):
    ks = pki.keystore("n1")[0]
    notpem = pki._write("junk.pem", "not a key")
    over = {k: v.replace("NOTPEM", notpem).replace("KS", ks) if v in ("KS", "NOTPEM") else v
            for k, v in over.items()}
    with pytest.raises(ConfigError, match=msg) as ei:
        _cfg(**over)
    assert "server.properties" in str(ei.value) and "\n" not in str(ei.value)
