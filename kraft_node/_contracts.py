"""The contract of each RPC codec twin pair: what ``kraft_node._native.X`` and ``kraft_node._pure.X`` both provide.

The Raft hot path's codecs (the request/response headers and Fetch) are
generated twice by ``codegen``: a Cython build and its pure-Python twin,
chosen once per process by ``kraft_storage.accel.load(name,
package="kraft_node")``.  As for the storage kernels (``kraft_storage/_contracts.py``,
whose module doc says why these are ``typing.Protocol`` classes and not
``.pyi`` stubs: one contract per *pair*, checked at run time by
``tests/storage/test_twin_contracts.py`` against both twins), each pair's API is a
Protocol the module satisfies.  An annotation ``type[P]`` is a message class
following ``P``; a message's fields and nested struct classes come from
Kafka's schema, so the test requires the twins to agree with each other on
them (constructor keywords and defaults, nested classes, class constants).

``TWINS`` maps each codec module name to its Protocol.
"""
from __future__ import annotations

from typing import Protocol

from kraft_storage.messages.runtime import GeneratedMessage

__all__ = ["TWINS", "RpcFetchCodec", "RpcHeadersCodec"]


class ApiMessage(GeneratedMessage, Protocol):
    """A request or response body of one API."""

    API_KEY: int


class RpcHeadersCodec(Protocol):
    """``_rpc_headers``: request header v1/v2 and response header v0/v1 (caller: ``kraft_node.protocol.headers``)."""

    @property
    def RequestHeader(self) -> type[GeneratedMessage]:
        """api key, api version, correlation id, client id."""

    @property
    def ResponseHeader(self) -> type[GeneratedMessage]:
        """correlation id."""


class RpcFetchCodec(Protocol):
    """``_rpc_fetch``: the Fetch API, apiKey 1 (caller: ``kraft_node.protocol.generated.fetch``)."""

    @property
    def FetchRequest(self) -> type[ApiMessage]:
        """A Fetch request (nested: FetchTopic, FetchPartition, ForgottenTopic, ReplicaState)."""

    @property
    def FetchResponse(self) -> type[ApiMessage]:
        """A Fetch response (nested: FetchableTopicResponse, PartitionData, EpochEndOffset, ...)."""


#: codec module name (``kraft_node._native.<name>`` / ``kraft_node._pure.<name>``) -> its contract.
TWINS: dict[str, type] = {
    "_rpc_headers": RpcHeadersCodec,
    "_rpc_fetch": RpcFetchCodec,
}
