"""``kraft-cluster``: Kafka's ``kafka-cluster.sh`` (ClusterTool).

    kraft-cluster cluster-id (--bootstrap-server H:P | --bootstrap-controller H:P) [--config F]
    kraft-cluster unregister --id N (--bootstrap-server H:P | --bootstrap-controller H:P) [--config F]

Prints ``Cluster ID: <id>`` (DescribeCluster) or ``Broker N is no longer registered.``
(UnregisterBroker, sent to the active controller -- through a broker, which forwards it, with
``--bootstrap-server``).  As Kafka's tool, the connection flags follow the sub-command; they
are accepted before it too (``kraft-cluster --bootstrap-server H:P cluster-id``).
``--config``/``-c`` (or ``--command-config``) is the admin client's properties file
(``security.protocol=SSL``, ``ssl.*``, timeouts).  Failures are one line on stderr, exit 1.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.unregister_broker import UnregisterBrokerRequest
from kraft_node.server.tools.admin import (
    AdminClient,
    AdminError,
    ToolArgumentParser,
    error_message,
    exception_name,
    load_settings,
    run,
    tool_main,
)

PROG = "kraft-cluster"


def _connection_flags(p: argparse.ArgumentParser, default: Any) -> None:
    p.add_argument("--bootstrap-server", "-b", default=default,
                   help="A list of host/port pairs to use for establishing the connection to the Kafka cluster.")
    p.add_argument("--bootstrap-controller", "-C", default=default,
                   help="A list of host/port pairs to use for establishing the connection to the KRaft controllers.")
    p.add_argument("--config", "-c", "--command-config", dest="config", default=default,
                   help="A property file containing configurations for the Admin client.")


def _parser() -> ToolArgumentParser:
    p = ToolArgumentParser(prog=PROG, description="The Kafka cluster tool.")
    _connection_flags(p, None)
    sub = p.add_subparsers(dest="command", required=True, parser_class=ToolArgumentParser)
    cid = sub.add_parser("cluster-id", help="Get information about the ID of a cluster.")
    unreg = sub.add_parser("unregister", help="Unregister a broker.")
    for s in (cid, unreg):
        _connection_flags(s, argparse.SUPPRESS)  # after the sub-command, as Kafka's tool takes them
    unreg.add_argument("--id", "-i", type=int, required=True, help="The ID of the broker to unregister.")
    return p


async def cluster_id(admin: AdminClient) -> list[str]:
    resp = await admin.describe_cluster()
    if resp.cluster_id:
        return [f"Cluster ID: {resp.cluster_id}"]
    return ["No cluster ID found. The Kafka version is probably too old."]


async def unregister(admin: AdminClient, broker_id: int) -> list[str]:
    try:
        resp = await admin.call(lambda v: UnregisterBrokerRequest(broker_id=broker_id), UnregisterBrokerRequest.API_KEY,
                                "controller")
    except AdminError as exc:
        if exc.code == Errors.UNSUPPORTED_VERSION:
            return ["The target cluster does not support the broker unregistration API."]
        raise
    if resp.error_code == Errors.UNSUPPORTED_VERSION:
        return ["The target cluster does not support the broker unregistration API."]
    if resp.error_code:
        raise AdminError(f"{exception_name(resp.error_code)}: {error_message(resp.error_code, resp.error_message)}",
                         resp.error_code)
    return [f"Broker {broker_id} is no longer registered."]


def _main(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)
    settings = load_settings(ns.bootstrap_server, ns.bootstrap_controller, ns.config,
                             lambda s: print(s, file=sys.stderr))
    if ns.command == "cluster-id":
        lines = run(cluster_id, settings)
    else:
        lines = run(lambda admin: unregister(admin, ns.id), settings)
    for line in lines:
        print(line)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main(PROG, argv, _main)


if __name__ == "__main__":
    sys.exit(main())
