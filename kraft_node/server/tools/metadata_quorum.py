"""``kraft-metadata-quorum``: Kafka's ``kafka-metadata-quorum.sh describe`` for kraft (and Kafka) quorums.

    kraft-metadata-quorum --bootstrap-controller HOST:PORT describe --status
    kraft-metadata-quorum --bootstrap-controller HOST:PORT describe --replication [--human-readable]
    kraft-metadata-quorum --bootstrap-controller HOST:PORT [--command-config F] add-controller [--config F] [--dry-run]
    kraft-metadata-quorum --bootstrap-controller HOST:PORT remove-controller --controller-id N
                          --controller-directory-id D [--dry-run]

It asks the first bootstrap controller that answers (comma-separated
``HOST:PORT`` list) for the cluster id and the active controller (DescribeCluster),
sends DescribeQuorum v2 to the active controller -- so any controller of the quorum
will do, as with Kafka's tool -- and prints what Kafka's MetadataQuorumCommand prints, in
the same layout (``ClusterId:`` ... ``CurrentObservers:``, or the replication
table with Kafka's tab-separated, space-padded columns), so scripts written for
Kafka's tool read ours.

``add-controller`` (KIP-853) reads the joining controller's own config (Kafka's
``--command-config``; ``--config`` after the sub-command is accepted too): its
``node.id``, the directory id from ``meta.properties`` in its metadata log dir,
and its controller listeners; it sends AddRaftVoter v1 to the active
controller (found with DescribeCluster) and prints Kafka's line, e.g.
``Added controller 2 with directory id <uuid> and endpoints: CONTROLLER://127.0.0.1:9094``.
``remove-controller`` sends RemoveRaftVoter and prints, exactly as Kafka's
``printf("%s KRaft controller %d with directory id %s%n", "Removed ", ...)``
does, ``Removed  KRaft controller 2 with directory id <uuid>`` (two spaces).
With ``--dry-run`` nothing is sent and the line starts ``DRY RUN of adding`` /
``DRY RUN of removing ``.  Retriable errors (NOT_LEADER_OR_FOLLOWER,
REQUEST_TIMED_OUT, connection failures) are retried until ``--timeout``,
as Kafka's Admin client retries them -- but a controller that refuses the
connection (nothing listens there), a host that does not resolve or a failed
TLS handshake ends the command within about a second, saying so with host:port.

``--command-config FILE`` (Kafka's flag) also carries the client's security
settings, as Kafka's Admin client reads them: ``security.protocol=SSL`` with
``ssl.truststore.*``, ``ssl.keystore.*`` (a client certificate, for
``ssl.client.auth=required``) and ``ssl.endpoint.identification.algorithm``
(see :mod:`kraft_node.network.tls`).  SASL protocols are refused.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time

from kraft_node.network import ConnectFailed, ConnectionClosed, KafkaConnection, RequestTimeout
from kraft_node.protocol.generated.add_raft_voter import AddRaftVoterRequest
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest
from kraft_node.protocol.generated.describe_quorum import DescribeQuorumRequest, DescribeQuorumResponse
from kraft_node.protocol.generated.remove_raft_voter import RemoveRaftVoterRequest
from kraft_storage.messages.runtime import Uuid

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
        parts.append('"endpoints": [' + ", ".join(f'"{_endpoint(ep)}"' for ep in node.listeners) + "]")
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


def _describe_error(resp: DescribeQuorumResponse) -> int:
    """DescribeQuorum's error: the top-level one, else the metadata partition's (a replica
    that is not the leader answers NOT_LEADER_OR_FOLLOWER there)."""
    if resp.error_code:
        return resp.error_code
    for t in resp.topics:
        for p in t.partitions:
            if t.topic_name == METADATA_TOPIC and p.partition_index == 0:
                return p.error_code
    return 0


async def fetch(host: str, port: int, timeout: float, ssl_context=None):
    """(DescribeCluster, DescribeQuorum) answers from the active controller, reached from
    the controller at ``host:port`` -- any controller of the quorum will do, as with
    Kafka's tool (whose Admin client sends DescribeQuorum to the active controller)."""
    return await fetch_from([(host, port)], timeout, ssl_context)


async def fetch_from(targets, timeout: float, ssl_context=None):
    """:func:`fetch` from the first of ``targets`` (host, port) that answers."""
    return await _send_to_active_controller(targets, describe_request(), 2, timeout, error_of=_describe_error,
                                            ssl_context=ssl_context)


def client_ssl_context(path: str | None):
    """The TLS context the ``--command-config`` file asks for (``security.protocol=SSL``),
    or None (PLAINTEXT, or no file)."""
    if path is None:
        return None
    props = _load_props(path)
    proto = props.get("security.protocol", "PLAINTEXT").strip().upper() or "PLAINTEXT"
    if proto == "PLAINTEXT":
        return None
    if proto in ("SASL_PLAINTEXT", "SASL_SSL"):
        raise QuorumToolError(f"{path}: security.protocol={proto} is not supported: kraft does not implement SASL")
    if proto != "SSL":
        raise QuorumToolError(f"{path}: security.protocol={proto!r} is not PLAINTEXT or SSL")
    from kraft_node.network.tls import TlsConfigError, client_context
    try:
        return client_context(props, None, path)
    except TlsConfigError as exc:
        raise QuorumToolError(str(exc)) from None


# ------------------------------------------------------------------ add/remove-controller (KIP-853)
#: Kafka error code -> exception name, for the errors AddRaftVoter/RemoveRaftVoter return.
_ERROR_NAMES = {6: "NotLeaderOrFollowerException", 7: "RequestTimedOutException", 35: "UnsupportedVersionException",
                42: "InvalidRequestException", 104: "InconsistentClusterIdException",
                125: "InvalidVoterKeyException", 126: "DuplicateVoterException", 127: "VoterNotFoundException"}
_RETRIABLE = {6, 7, 8, 15}  # NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, BROKER_NOT_AVAILABLE, COORDINATOR_NOT_AVAILABLE


def _format_endpoint(name: str, host: str, port: int) -> str:
    return f"{name}://[{host}]:{port}" if ":" in host else f"{name}://{host}:{port}"


def controller_to_add(config_path: str):
    """``(node_id, directory_id, [(listener, host, port)])`` of the controller described by
    ``config_path`` (Kafka's getControllerId / getMetadataDirectoryId / getControllerAdvertisedListeners)."""
    from kraft_node.server.config import parse_listeners
    from kraft_storage.errors import KraftStorageError
    from kraft_storage.meta_properties import read_meta_properties
    props = _load_props(config_path)
    if "node.id" not in props:
        raise QuorumToolError("node.id not found in configuration file. Is this a valid controller configuration file?")
    try:
        node_id = int(props["node.id"])
    except ValueError:
        raise QuorumToolError(f"node.id {props['node.id']!r} is not a number") from None
    if node_id < 0:
        raise QuorumToolError("node.id was negative in configuration file. Is this a valid controller "
                              "configuration file?")
    if "controller" not in props.get("process.roles", ""):
        raise QuorumToolError("process.roles did not contain 'controller' in configuration file. Is this a valid "
                              "controller configuration file?")
    if props.get("metadata.log.dir"):
        meta_dir = props["metadata.log.dir"]
    elif props.get("log.dirs") or props.get("log.dir"):
        meta_dir = (props.get("log.dirs") or props.get("log.dir")).strip().split(",")[0]
    else:
        raise QuorumToolError("Neither metadata.log.dir nor log.dirs were found. Is this a valid controller "
                              "configuration file?")
    try:
        meta = read_meta_properties(meta_dir).meta
    except (KraftStorageError, OSError):
        raise QuorumToolError(f"Unable to read meta.properties from {meta_dir}") from None
    if not meta.directory_id:
        raise QuorumToolError(f"No directory id found in {meta_dir}")
    listeners = {}
    for key in ("listeners", "advertised.listeners"):
        try:
            for e in parse_listeners(props.get(key, ""), config_path):
                listeners[e.name] = e
        except Exception as exc:  # noqa: BLE001 - a ConfigError names the bad entry
            raise QuorumToolError(str(exc)) from None
    if "controller.listener.names" not in props:
        raise QuorumToolError("controller.listener.names was not found. Is this a valid controller configuration "
                              "file?")
    eps = []
    for name in props["controller.listener.names"].split(","):
        name = name.strip().upper()
        e = listeners.get(name)
        if e is None:
            raise QuorumToolError(f"Cannot find information about controller listener name: {name}")
        eps.append((e.name, e.host or "localhost", e.port))
    return node_id, Uuid(meta.directory_id), eps


def _load_props(path: str) -> dict[str, str]:
    import os
    if not os.path.exists(path):
        raise QuorumToolError(f"Properties file {path} does not exist.")
    from kraft_node.server.config import ConfigError, read_properties_file
    try:
        return read_properties_file(path)
    except ConfigError as exc:
        raise QuorumToolError(str(exc)) from None


def add_controller_line(node_id: int, directory_id, endpoints, dry_run: bool) -> str:
    head = "DRY RUN of adding" if dry_run else "Added"
    eps = ", ".join(_format_endpoint(n, h, p) for n, h, p in endpoints)
    return f"{head} controller {node_id} with directory id {directory_id} and endpoints: {eps}"


def remove_controller_line(node_id: int, directory_id, dry_run: bool) -> str:
    head = "DRY RUN of removing " if dry_run else "Removed "
    return f"{head} KRaft controller {node_id} with directory id {directory_id}"


#: How long connections refused by every bootstrap controller are retried (a controller
#: that is restarting) before the command gives up, in seconds.
REFUSED_GRACE_S = 1.0


async def _send_to_active_controller(targets, body, version: int, timeout: float,
                                     error_of=lambda resp: resp.error_code, ssl_context=None):
    """Send ``body`` to the active controller (DescribeCluster's controllerId, asked of
    each of ``targets`` in turn), retrying retriable errors (``error_of(response)``) until
    ``timeout`` seconds have passed.  Returns (the DescribeCluster answer, the response).
    When every target fails to connect for a reason waiting will not fix (refused for
    :data:`REFUSED_GRACE_S`, an unresolvable host, a TLS failure), it fails at once."""
    start = time.monotonic()
    deadline = start + timeout
    last = "no controller answered"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise QuorumToolError(f"timed out: {last}")
        hopeless = []
        for host, port in targets:
            try:
                conn = await KafkaConnection.open(host, port, timeout=min(left, 5.0), client_id="kraft-metadata-quorum",
                                                  ssl_context=ssl_context)
            except (OSError, asyncio.TimeoutError, ConnectionClosed) as exc:
                last = f"cannot connect to {exc}" if isinstance(exc, ConnectFailed) else \
                    f"cannot connect to {host}:{port}: {exc}"
                reason = getattr(exc, "reason", None)
                if reason in ("unresolved", "tls") or \
                        (reason == "refused" and time.monotonic() - start >= min(REFUSED_GRACE_S, timeout)):
                    hopeless.append(last)
                continue
            try:
                cluster = await conn.request(DescribeClusterRequest(endpoint_type=2), 1, min(left, 5.0))
                leader = next((b for b in cluster.brokers if b.broker_id == cluster.controller_id), None)
            except (OSError, ConnectionClosed, RequestTimeout, asyncio.TimeoutError) as exc:
                last = f"{host}:{port}: {exc}"
                await conn.close()
                continue
            await conn.close()
            if leader is None:
                last = "no active controller known yet"
                continue
            try:
                lconn = await KafkaConnection.open(leader.host, leader.port, timeout=min(left, 5.0),
                                                   client_id="kraft-metadata-quorum", ssl_context=ssl_context)
                try:
                    resp = await lconn.request(body, version, max(1.0, left))
                finally:
                    await lconn.close()
            except (OSError, ConnectionClosed, RequestTimeout, asyncio.TimeoutError) as exc:
                last = f"controller {leader.broker_id} at {leader.host}:{leader.port}: {exc or type(exc).__name__}"
                continue
            code = error_of(resp)
            if code in _RETRIABLE:
                last = f"{_ERROR_NAMES.get(code, code)}: {resp.error_message or ''}"
                continue
            if code:
                name = _ERROR_NAMES.get(code, f"error code {code}")
                raise QuorumToolError(f"{name}: {resp.error_message or ''}".rstrip(": "))
            return cluster, resp
        if len(hopeless) == len(targets):
            raise QuorumToolError("; ".join(hopeless))
        await asyncio.sleep(0.2)


def _targets(text: str):
    out = []
    for t in text.split(","):
        t = t.strip()
        host, _, port = t.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise QuorumToolError(f"{t!r} is not host:port (a port from 1 to 65535)")
        out.append((host.strip("[]"), int(port)))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="kraft-metadata-quorum",
                                description="Describe the KRaft metadata quorum, like kafka-metadata-quorum.sh")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--bootstrap-controller", metavar="HOST:PORT")
    g.add_argument("--bootstrap-server", metavar="HOST:PORT")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties (security.protocol=SSL, ssl.truststore.*, ssl.keystore.*, "
                        "ssl.endpoint.identification.algorithm); for add-controller also the controller's config")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("add-controller", help="Add a controller to the KRaft controller cluster")
    a.add_argument("--config", help="the properties file of the controller to add (same as --command-config)")
    a.add_argument("--dry-run", action="store_true")
    r = sub.add_parser("remove-controller", help="Remove a controller from the KRaft controller cluster")
    r.add_argument("--controller-id", "-i", type=int, required=True)
    r.add_argument("--controller-directory-id", "-d", required=True)
    r.add_argument("--dry-run", action="store_true")
    d = sub.add_parser("describe")
    dg = d.add_mutually_exclusive_group(required=True)
    dg.add_argument("--status", action="store_true")
    dg.add_argument("--replication", action="store_true")
    d.add_argument("--human-readable", action="store_true")
    args = p.parse_args(argv)
    target_text = args.bootstrap_controller or args.bootstrap_server
    if not args.timeout > 0:
        p.error(f"--timeout must be a positive number of seconds, not {args.timeout}")
    try:
        targets = _targets(target_text)
    except QuorumToolError as exc:
        print(f"kraft-metadata-quorum: {exc}", file=sys.stderr)
        return 1
    try:
        ssl_context = client_ssl_context(args.command_config)
    except QuorumToolError as exc:
        print(f"kraft-metadata-quorum: {exc}", file=sys.stderr)
        return 1
    if args.cmd in ("add-controller", "remove-controller"):
        try:
            return _change_controllers(args, targets, ssl_context)
        except (OSError, QuorumToolError) as exc:
            print(f"kraft-metadata-quorum: {exc}", file=sys.stderr)
            return 1
    try:
        cluster, quorum = asyncio.run(fetch_from(targets, args.timeout, ssl_context))
        if args.status:
            if cluster.error_code:
                raise QuorumToolError(f"DescribeCluster failed with error code {cluster.error_code}")
            sys.stdout.write(format_status(cluster.cluster_id, quorum))
        else:
            sys.stdout.write(format_replication(quorum, args.human_readable))
        return 0
    except (OSError, ConnectionClosed, RequestTimeout, asyncio.TimeoutError, QuorumToolError) as exc:
        print(f"kraft-metadata-quorum: {target_text}: {exc or type(exc).__name__}", file=sys.stderr)
        return 1


def _change_controllers(args, targets, ssl_context=None) -> int:
    if args.cmd == "add-controller":
        path = args.config or args.command_config
        if path is None:
            raise QuorumToolError("You must supply the configuration file of the controller you are adding when "
                                  "using add-controller.")
        node_id, dir_id, eps = controller_to_add(path)
        if not args.dry_run:
            R = AddRaftVoterRequest
            body = R(cluster_id=None, timeout_ms=int(args.timeout * 1000), voter_id=node_id,
                     voter_directory_id=dir_id, listeners=[R.Listener(name=n, host=h, port=p) for n, h, p in eps],
                     ack_when_committed=True)
            asyncio.run(_send_to_active_controller(targets, body, 1, args.timeout, ssl_context=ssl_context))
        print(add_controller_line(node_id, dir_id, eps, args.dry_run))
        return 0
    if args.controller_id < 0:
        raise QuorumToolError(f"Invalid negative --controller-id: {args.controller_id}")
    try:
        dir_id = Uuid(args.controller_directory_id)
    except (ValueError, TypeError) as exc:
        raise QuorumToolError(f"Failed to parse --controller-directory-id: {exc}") from None
    if not args.dry_run:
        body = RemoveRaftVoterRequest(cluster_id=None, voter_id=args.controller_id, voter_directory_id=dir_id)
        asyncio.run(_send_to_active_controller(targets, body, 0, args.timeout, ssl_context=ssl_context))
    print(remove_controller_line(args.controller_id, dir_id, args.dry_run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
