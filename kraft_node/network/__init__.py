"""Kafka's wire protocol over TCP (asyncio): a request server and a client connection.

Both speak size-prefixed frames with the generated codecs of
``kraft_node.protocol``.  They know nothing of Raft: the Raft driver, the
controller and the broker plug handlers into :class:`KafkaServer` and send
through :class:`KafkaConnection`.  Both take an optional :class:`ssl.SSLContext`
(Kafka's SSL security protocol; :mod:`kraft_node.network.tls` builds them from
Kafka's ``ssl.*`` keys).
"""
from kraft_node.network.client import ConnectFailed, ConnectionClosed, KafkaConnection, RequestTimeout
from kraft_node.network.server import KafkaServer, RequestContext

__all__ = ["KafkaServer", "RequestContext", "KafkaConnection", "ConnectionClosed", "ConnectFailed",
           "RequestTimeout"]
