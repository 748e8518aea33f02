"""A mutual-TLS cluster of ``kraft-server-start`` processes (issue 19, Deliver 4).

Three voters with ``listener.security.protocol.map=CONTROLLER:SSL`` and
``ssl.client.auth=required`` (certificates made at test time) elect a leader and
acknowledge the demo writer's records, which reach every node's log; the
``kraft-metadata-quorum`` CLI in a subprocess describes the quorum with
``--command-config`` (security.protocol=SSL) and fails without it; no node warns
that its ssl.* keys are unused; all exit 0 on SIGTERM.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import REPO
from support.cluster import Node, check_acks_everywhere, wait_acks
from support.pki import Pki
from support.raft import CLUSTER_ID, cluster_properties


def _cli(port, *extra, timeout=20):
    return subprocess.run([sys.executable, "-m", "kraft_node.server.tools.metadata_quorum", "--bootstrap-controller",
                           f"127.0.0.1:{port}", *extra, "describe", "--status"], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))


def test_mutual_tls_cluster_of_processes_replicates_and_answers_the_cli(tmp_path):
    pki = Pki(str(tmp_path))
    paths = cluster_properties(str(tmp_path), 3)
    for i, p in enumerate(paths):
        ks = pki.keystore(f"node{i + 1}")[0]
        with open(p, "a") as f:
            f.write("listener.security.protocol.map=CONTROLLER:SSL\n"
                    f"ssl.keystore.type=PEM\nssl.keystore.location={ks}\n"
                    f"ssl.truststore.type=PEM\nssl.truststore.location={pki.cafile}\n"
                    "ssl.client.auth=required\nssl.endpoint.identification.algorithm=https\n")
    admin = str(tmp_path / "admin.properties")
    with open(admin, "w") as f:
        f.write(f"security.protocol=SSL\nssl.truststore.location={pki.cafile}\n"
                f"ssl.keystore.location={pki.keystore('admin')[0]}\n")
    nodes = [Node(p, writer=True) for p in paths]
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_serving()
        wait_acks(nodes, 50, timeout=20)
        deadline = time.monotonic() + 15
        while True:
            r = _cli(nodes[0].port, "--command-config", admin)
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert r.returncode == 0, r.stderr
        assert f"ClusterId:              {CLUSTER_ID}" in r.stdout and "LeaderId:" in r.stdout
        plain = _cli(nodes[0].port, "--timeout", "2")
        assert plain.returncode == 1 and "kraft-metadata-quorum:" in plain.stderr
        assert "Traceback" not in plain.stderr
        for n in nodes:
            n.signal(__import__("signal").SIGUSR1)  # stop writing, keep serving
        time.sleep(0.5)
        for n in nodes:
            assert n.stop() == 0, n.stderr()[-3000:]
    finally:
        for n in nodes:
            n.kill9()
    check_acks_everywhere(nodes)
    for n in nodes:
        err = n.stderr()
        assert "were supplied but are not used yet" not in err, err[-2000:]
        assert "Traceback" not in err, err[-3000:]
