"""kraft-storage random-uuid / format, as Kafka's kafka-storage.sh."""
import io
import os

import pytest

from kraft_node.server.config import NodeConfig
from kraft_node.server.tools.storage import FormatError, format_storage, main, random_uuid, release_level
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.meta_properties import read_meta_properties
from kraft_storage.snapshot import BOOTSTRAP_SNAPSHOT_ID, RecordsSnapshotReader, read_bootstrap_checkpoint

CID = "5L6g3nShT-eMCtK--X86sw"


def config(tmp_path, voters=True, extra=""):
    text = ("process.roles=controller\nnode.id=1\n"
            + ("controller.quorum.voters=1@127.0.0.1:9093\n" if voters
               else "controller.quorum.bootstrap.servers=127.0.0.1:9093\n")
            + f"listeners=CONTROLLER://127.0.0.1:9093\ncontroller.listener.names=CONTROLLER\n"
            f"log.dirs={tmp_path}/a,{tmp_path}/b\nmetadata.log.dir={tmp_path}/m\n{extra}")
    p = tmp_path / "server.properties"
    p.write_text(text)
    return str(p)


def features(reader):
    cols = reader.records()
    return [(m.name, m.feature_level) for m in
            (decode_metadata_record(cols.value(i))[2] for i in range(len(cols)))]


def test_random_uuid(capsys):
    ids = {random_uuid() for _ in range(200)}
    assert len(ids) == 200 and not any(i.startswith("-") for i in ids)
    assert all(len(i) == 22 and str(Uuid(i)) == i for i in ids)
    assert main(["random-uuid"]) == 0
    assert len(capsys.readouterr().out.strip()) == 22


def test_format_static_quorum(tmp_path):
    out = io.StringIO()
    assert format_storage(NodeConfig.from_file(config(tmp_path)), CID, out=out) == 0
    metas = {d: read_meta_properties(str(tmp_path / d)).meta for d in "abm"}
    assert {m.cluster_id for m in metas.values()} == {CID} and {m.node_id for m in metas.values()} == {1}
    assert len({m.directory_id for m in metas.values()}) == 3
    assert "Formatting metadata directory" in out.getvalue()
    r = read_bootstrap_checkpoint(tmp_path / "m")
    assert r.header.last_contained_log_timestamp == 0
    assert features(r) == [("metadata.version", 29), ("eligible.leader.replicas.version", 1),
                           ("group.version", 1), ("share.version", 1), ("streams.version", 1),
                           ("transaction.version", 2)]
    assert not os.path.exists(tmp_path / "a" / "bootstrap.checkpoint")


def test_format_release_version(tmp_path):
    format_storage(NodeConfig.from_file(config(tmp_path)), CID, release_version="3.7", out=io.StringIO())
    assert features(read_bootstrap_checkpoint(tmp_path / "m")) == [("metadata.version", 19)]
    assert release_level("4.0") == ("4.0-IV3", 25)
    with pytest.raises(FormatError, match="unknown release version"):
        release_level("2.8")


def test_format_standalone_writes_bootstrap_snapshot_with_voters(tmp_path):
    cfg = NodeConfig.from_file(config(tmp_path, voters=False))
    format_storage(cfg, CID, standalone=True, out=io.StringIO())
    r = RecordsSnapshotReader.open(tmp_path / "m" / "__cluster_metadata-0", BOOTSTRAP_SNAPSHOT_ID)
    assert r.kraft_version == 1
    (v,) = r.voters.voters
    meta = read_meta_properties(str(tmp_path / "m")).meta
    assert v.voter_id == 1 and str(v.voter_directory_id) == meta.directory_id
    assert [(e.name, e.host, e.port) for e in v.endpoints] == [("CONTROLLER", "127.0.0.1", 9093)]
    assert features(r)[0] == ("metadata.version", 29)


def test_format_initial_controllers_uses_given_directory_id(tmp_path):
    cfg = NodeConfig.from_file(config(tmp_path, voters=False))
    d1, d2 = random_uuid(), random_uuid()
    format_storage(cfg, CID, initial_controllers=f"1@127.0.0.1:9093:{d1},2@127.0.0.1:9094:{d2}", out=io.StringIO())
    assert read_meta_properties(str(tmp_path / "m")).meta.directory_id == d1
    r = RecordsSnapshotReader.open(tmp_path / "m" / "__cluster_metadata-0", BOOTSTRAP_SNAPSHOT_ID)
    assert [v.voter_id for v in r.voters.voters] == [1, 2]


@pytest.mark.parametrize("kw,voters,msg", [
    ({"standalone": True}, True, "need controller.quorum.voters to be unset"),
    ({}, False, "you must specify one of --standalone"),
    ({"initial_controllers": "1@h:1"}, False, "has no directory id"),
    ({"initial_controllers": "1@h:1:notauuid"}, False, "is not a Uuid"),
    ({"standalone": True, "release_version": "3.8"}, False, "needs metadata.version 3.9-IV0 or later, not 3.8-IV0"),
    ({"cluster_id": "abc"}, True, "Cluster ID string abc does not appear to be a valid UUID"),
    # '+' and '/' decode in Python's urlsafe decoder, not in Kafka's: a node would refuse this id
    ({"cluster_id": "5L6g3nShT+eMCtK/-X86sw"}, True, r"Cluster ID string 5L6g3nShT\+eMCtK/-X86sw does not appear"),
])
def test_format_errors(tmp_path, kw, voters, msg):
    cid = kw.pop("cluster_id", CID)
    with pytest.raises(FormatError, match=msg):
        format_storage(NodeConfig.from_file(config(tmp_path, voters=voters)), cid, out=io.StringIO(), **kw)
    # refused before anything was written
    assert not any(os.path.exists(tmp_path / d) for d in ("a", "b", "m"))


def test_format_reports_an_unwritable_log_dir(tmp_path, capsys):
    (tmp_path / "a").write_text("a file where a log dir should be")
    assert main(["format", "-c", config(tmp_path), "-t", CID]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kraft-storage: cannot write") and str(tmp_path / "a") in err, err


def test_already_formatted_and_wrong_cluster(tmp_path, capsys):
    cfgp = config(tmp_path)
    assert main(["format", "-c", cfgp, "-t", CID]) == 0
    assert main(["format", "-c", cfgp, "-t", CID]) == 1
    assert "already formatted" in capsys.readouterr().err
    assert main(["format", "-c", cfgp, "-t", CID, "--ignore-formatted"]) == 0
    assert main(["format", "-c", cfgp, "-t", random_uuid(), "--ignore-formatted"]) == 1
    assert "belongs to cluster" in capsys.readouterr().err
    assert main(["format", "-c", str(tmp_path / "missing.properties"), "-t", CID]) == 1
