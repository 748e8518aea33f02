"""kraft-metadata-quorum output, byte-compatible with Kafka's MetadataQuorumCommand layout."""
import pytest

from kraft_node.protocol.generated.describe_quorum import DescribeQuorumResponse as R
from kraft_node.server.tools.metadata_quorum import QuorumToolError, format_replication, format_status
from kraft_storage.messages.runtime import Uuid

D1 = Uuid("Teb3PFb009qvAZgMDEFH4g")


def response(observers=()):
    rs = [R.ReplicaState(replica_id=1, replica_directory_id=D1, log_end_offset=100, last_fetch_timestamp=-1,
                         last_caught_up_timestamp=5000),
          R.ReplicaState(replica_id=2, replica_directory_id=Uuid(bytes(16)), log_end_offset=90,
                         last_fetch_timestamp=4990, last_caught_up_timestamp=4000)]
    part = R.PartitionData(partition_index=0, leader_id=1, leader_epoch=7, high_watermark=95,
                           current_voters=rs, observers=list(observers))
    nodes = [R.Node(node_id=1, listeners=[R.Listener(name="CONTROLLER", host="127.0.0.1", port=9093)])]
    return R(error_code=0, topics=[R.TopicData(topic_name="__cluster_metadata", partitions=[part])], nodes=nodes)


def test_status_layout():
    out = format_status("5L6g3nShT-eMCtK--X86sw", response())
    assert out == (
        "ClusterId:              5L6g3nShT-eMCtK--X86sw\n"
        "LeaderId:               1\n"
        "LeaderEpoch:            7\n"
        "HighWatermark:          95\n"
        "MaxFollowerLag:         10\n"
        "MaxFollowerLagTimeMs:   1000\n"
        'CurrentVoters:          [{"id": 1, "directoryId": "Teb3PFb009qvAZgMDEFH4g", '
        '"endpoints": ["CONTROLLER://127.0.0.1:9093"]}, {"id": 2}]\n'
        "CurrentObservers:       []\n")


def test_replication_table():
    obs = [R.ReplicaState(replica_id=5, log_end_offset=80, last_fetch_timestamp=4999, last_caught_up_timestamp=-1)]
    out = format_replication(response(obs), now_ms=6000).splitlines()
    assert out[0] == ("NodeId\tDirectoryId           \tLogEndOffset\tLag\tLastFetchTimestamp\t"
                      "LastCaughtUpTimestamp\tStatus  \t")
    assert out[1].split("\t")[:7] == ["1     ", "Teb3PFb009qvAZgMDEFH4g", "100         ", "0  ",
                                      "-1                ", "5000                 ", "Leader  "]
    assert [r.split()[0] for r in out[1:]] == ["1", "2", "5"]
    assert out[3].split()[-1] == "Observer"
    human = format_replication(response(obs), human_readable=True, now_ms=6000)
    assert "1010 ms ago" in human and "2000 ms ago" in human


def test_errors():
    bad = response()
    bad.topics[0].partitions[0].leader_id = 9
    with pytest.raises(QuorumToolError, match="leader 9 is not among"):
        format_status("x", bad)
    with pytest.raises(QuorumToolError, match="error code 57"):
        format_status("x", R(error_code=57))
