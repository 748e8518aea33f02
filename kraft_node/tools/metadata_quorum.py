"""``kraft-metadata-quorum``: Kafka's ``kafka-metadata-quorum.sh describe`` for kraft (and Kafka) quorums.

    kraft-metadata-quorum --bootstrap-controller HOST:PORT describe --status
    kraft-metadata-quorum --bootstrap-controller HOST:PORT describe --replication [--human-readable]

It sends DescribeCluster (for the cluster id) and DescribeQuorum v2 to the
given controller, and prints what Kafka's MetadataQuorumCommand prints, in
the same layout (``ClusterId:`` ... ``CurrentObservers:``, or the replication
table with Kafka's tab-separated, space-padded columns), so scripts written for
Kafka's tool read ours.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time

from kraft_node.network import ConnectionClosed, KafkaConnection, RequestTimeout
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest
from kraft_node.protocol.generated.describe_quorum import DescribeQuorumRequest, DescribeQuorumResponse
from kraft_storage.messages._runtime import Uuid

METADATA_TOPIC = "__cluster_metadata"
ZERO_UUID = Uuid(bytes(16))


class QuorumToolError(Exception):
    pass


def _endpoint(listener) -> str:
    host = f"[{listener.host}]" if ":" in listener.host else listener.host
    return f"{listener.name}://{host}:{listener.port}"


def _node_str(replica, nodes) -> str:
    parts = [f'"id": {replica.replica_id}']
    did = replica.replica_directory_id
    if did is not None and did != ZERO_UUID:
        parts.append(f'"directoryId": "{did}"')
    node = nodes.get(replica.replica_id)
    if node is not None and node.listeners:
        parts.append('"endpoints": [' + ", ".join(f'"{_endpoint(l)}"' for l in node.listeners) + "]")
    return "{" + ", ".join(parts) + "}"


def _partition(resp: DescribeQuorumResponse):
    if resp.error_code:
        raise QuorumToolError(f"DescribeQuorum failed with error code {resp.error_code}"
                              + (f": {resp.error_message}" if getattr(resp, "error_message", None) else ""))
    for t in resp.topics:
        if t.topic_name == METADATA_TOPIC:
            for p in t.partitions:
                if p.partition_index == 0:
                    if p.error_code:
                        raise QuorumToolError(f"DescribeQuorum partition error code {p.error_code}")
                    return p
    raise QuorumToolError("DescribeQuorum response has no __cluster_metadata-0")


def format_status(cluster_id: str, resp: DescribeQuorumResponse) -> str:
    p = _partition(resp)
    nodes = {n.node_id: n for n in (resp.nodes or ())}
    leader = next((v for v in p.current_voters if v.replica_id == p.leader_id), None)
    if leader is None:
        raise QuorumToolError(f"the leader {p.leader_id} is not among the current voters")
    lagger = min(p.current_voters, key=lambda v: v.log_end_offset)
    max_lag = leader.log_end_offset - lagger.log_end_offset
    if lagger is leader:
        lag_ms = 0
    elif leader.last_caught_up_timestamp >= 0 and lagger.last_caught_up_timestamp >= 0:
        lag_ms = leader.last_caught_up_timestamp - lagger.last_caught_up_timestamp
    else:
        lag_ms = -1
    return (f"ClusterId:              {cluster_id}\n"
            f"LeaderId:               {p.leader_id}\n"
            f"LeaderEpoch:            {p.leader_epoch}\n"
            f"HighWatermark:          {p.high_watermark}\n"
            f"MaxFollowerLag:         {max_lag}\n"
            f"MaxFollowerLagTimeMs:   {lag_ms}\n"
            f"CurrentVoters:          [{', '.join(_node_str(v, nodes) for v in p.current_voters)}]\n"
            f"CurrentObservers:       [{', '.join(_node_str(v, nodes) for v in p.observers)}]\n")


def _pretty_table(headers, rows) -> str:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = []
    for row in [headers] + rows:
        lines.append("".join(v + " " * (w - len(v)) + "\t" for v, w in zip(row, widths)))
    return "\n".join(lines) + "\n"


def format_replication(resp: DescribeQuorumResponse, human_readable: bool = False,
                       now_ms: int | None = None) -> str:
    p = _partition(resp)
    leader = next((v for v in p.current_voters if v.replica_id == p.leader_id), None)
    if leader is None:
        raise QuorumToolError(f"the leader {p.leader_id} is not among the current voters")
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms

    def ts(v):
        if v < 0:
            return "-1"
        return f"{now_ms - v} ms ago" if human_readable else str(v)

    rows = []
    groups = [([leader], "Leader"), ([v for v in p.current_voters if v.replica_id != p.leader_id], "Follower"),
              (list(p.observers), "Observer")]
    for reps, status in groups:
        for r in reps:
            did = r.replica_directory_id if r.replica_directory_id is not None else ZERO_UUID
            rows.append([str(r.replica_id), str(did), str(r.log_end_offset),
                         str(leader.log_end_offset - r.log_end_offset), ts(r.last_fetch_timestamp),
                         ts(r.last_caught_up_timestamp), status])
    return _pretty_table(["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                          "LastCaughtUpTimestamp", "Status"], rows)


def describe_request() -> DescribeQuorumRequest:
    R = DescribeQuorumRequest
    return R(topics=[R.TopicData(topic_name=METADATA_TOPIC, partitions=[R.PartitionData(partition_index=0)])])


async def fetch(host: str, port: int, timeout: float):
    conn = await KafkaConnection.open(host, port, timeout=timeout, client_id="kraft-metadata-quorum")
    try:
        cluster = await conn.request(DescribeClusterRequest(endpoint_type=2), 1, timeout)
        quorum = await conn.request(describe_request(), 2, timeout)
    finally:
        await conn.close()
    return cluster, quorum


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="kraft-metadata-quorum",
                                description="Describe the KRaft metadata quorum, like kafka-metadata-quorum.sh")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--bootstrap-controller", metavar="HOST:PORT")
    g.add_argument("--bootstrap-server", metavar="HOST:PORT")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("describe")
    dg = d.add_mutually_exclusive_group(required=True)
    dg.add_argument("--status", action="store_true")
    dg.add_argument("--replication", action="store_true")
    d.add_argument("--human-readable", action="store_true")
    args = p.parse_args(argv)
    target = (args.bootstrap_controller or args.bootstrap_server).split(",")[0].strip()
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        print(f"kraft-metadata-quorum: {target!r} is not host:port", file=sys.stderr)
        return 1
    try:
        cluster, quorum = asyncio.run(fetch(host.strip("[]"), int(port), args.timeout))
        if args.status:
            if cluster.error_code:
                raise QuorumToolError(f"DescribeCluster failed with error code {cluster.error_code}")
            sys.stdout.write(format_status(cluster.cluster_id, quorum))
        else:
            sys.stdout.write(format_replication(quorum, args.human_readable))
        return 0
    except (OSError, ConnectionClosed, RequestTimeout, asyncio.TimeoutError, QuorumToolError) as exc:
        print(f"kraft-metadata-quorum: {target}: {exc or type(exc).__name__}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
