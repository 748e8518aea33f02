"""cluster.id must be a Kafka base64 Uuid (issue 19, Deliver 6), and a cluster-id mismatch
between voters is logged on both sides, once per peer, with the two ids."""
from __future__ import annotations

import asyncio
import logging

import pytest
from conftest import fixture_params
from support.raft import CLUSTER_ID, cluster_properties

from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode
from kraft_storage.meta_properties import (
    MetaProperties,
    MetaPropertiesError,
    MetaPropertiesFile,
    read_meta_properties,
    write_meta_properties,
)

OTHER_ID = "7Hh2sM8tR0qHkq5R3gqUZA"


@pytest.mark.parametrize("value", ["garbage!", "x", "5L6g3nShT-eMCtK--X86s", "5L6g3nShT-eMCtK--X86sw=",
                                   "5L6g3nShT+eMCtK/-X86sw", ""])
def test_cluster_id_must_be_a_kafka_uuid(tmp_path, value):
    p = tmp_path / "meta.properties"
    p.write_text(f"#\n#Mon Apr 06 10:27:56 GMT 2026\ncluster.id={value}\nnode.id=1\nversion=1\n")
    with pytest.raises(MetaPropertiesError) as ei:
        read_meta_properties(str(tmp_path))
    msg = str(ei.value)
    assert msg.startswith(f"{p}: cluster.id {value!r} is not a Kafka base64 Uuid"), msg


def test_a_kafka_uuid_is_accepted(tmp_path):
    write_meta_properties(str(tmp_path), MetaProperties(1, "5L6g3nShT-eMCtK--X86sw", 1))
    assert read_meta_properties(str(tmp_path)).meta.cluster_id == "5L6g3nShT-eMCtK--X86sw"


@pytest.mark.parametrize("path", fixture_params("meta.properties"), ids=lambda p: p.parts[-2])
def test_kafkas_own_files_still_parse(path):
    f = MetaPropertiesFile.parse(path.read_bytes(), str(path))
    assert f.to_bytes() == path.read_bytes()
    if f.meta.cluster_id == "q1w2e3r4t5y6u7i8o9p0":
        # Kafka 3.7 (bitnami image) wrote this 20-character id: the codec reads it, a node refuses it
        with pytest.raises(MetaPropertiesError, match="'q1w2e3r4t5y6u7i8o9p0' is not a Kafka base64 Uuid"):
            read_meta_properties(str(path.parent))
    else:
        assert read_meta_properties(str(path.parent)).meta.cluster_id == f.meta.cluster_id


def test_cluster_id_mismatch_is_logged_on_both_sides_once_per_peer(tmp_path, caplog):
    """Node 2 is formatted with another cluster id.  Before: every RPC between them was
    answered INCONSISTENT_CLUSTER_ID and nothing was logged at any level, while node 2
    looped between prospective and unattached.  Now each side says it, once per peer,
    with the two ids, however many requests are refused."""
    paths = cluster_properties(str(tmp_path), 2)
    d2 = NodeConfig.from_file(paths[1]).metadata_log_dir
    meta = read_meta_properties(d2).meta
    meta.cluster_id = OTHER_ID
    write_meta_properties(d2, meta)

    async def go():
        ns = [KraftNode.from_config(NodeConfig.from_file(p)) for p in paths]
        try:
            for n in ns:
                await n.start()
            await asyncio.sleep(4.0)  # several election rounds: many refused Vote requests
        finally:
            for n in ns:
                await n.close()

    with caplog.at_level(logging.WARNING, logger="kraft.raft"):
        asyncio.run(asyncio.wait_for(go(), 30))
    msgs = [r.getMessage() for r in caplog.records if "INCONSISTENT_CLUSTER_ID" in r.getMessage()]
    answered = {n: [m for m in msgs if m.startswith(f"node {n}: ") and "answering" in m] for n in (1, 2)}
    refused = {n: [m for m in msgs if m.startswith(f"node {n}: ") and "refused our" in m] for n in (1, 2)}
    mine = {1: CLUSTER_ID, 2: OTHER_ID}
    for n, other in ((1, 2), (2, 1)):
        assert len(answered[n]) == 1, msgs
        assert f"from node {other}" in answered[n][0]
        assert f"carries cluster id {mine[other]}" in answered[n][0]
        assert f"belongs to cluster {mine[n]}" in answered[n][0]
        assert len(refused[n]) == 1, msgs
        assert f"node {other} at 127.0.0.1:" in refused[n][0]
        assert f"it belongs to cluster {mine[other]}, this node to cluster {mine[n]}" in refused[n][0]
