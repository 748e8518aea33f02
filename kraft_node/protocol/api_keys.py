"""The APIs kraft speaks, their supported versions, and ApiVersions answers.

The supported range of every API is its schema's ``validVersions`` (the
generated classes encode and decode exactly those).  An API version is
*flexible* from ``first_flexible`` on; that decides the header versions:

* request header v2 (with tagged fields) for flexible versions, else v1;
* response header v1 for flexible versions, else v0, except ApiVersions
  responses, which always use v0 so that a client that sent a version the
  server does not know can still read the error (KIP-511).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from kraft_node.protocol.generated import APIS
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest, ApiVersionsResponse

__all__ = ["ApiKeys", "ApiInfo", "API_INFO", "api_info", "request_header_version", "response_header_version",
           "api_versions_response", "unsupported_version_response", "UNSUPPORTED_VERSION"]

#: Kafka error code UNSUPPORTED_VERSION.
UNSUPPORTED_VERSION = 35


def _upper_snake(name: str) -> str:
    import re
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).upper()


#: Every API by Kafka's name (``ApiKeys.FETCH == 1``, ``ApiKeys.API_VERSIONS == 18``...).
ApiKeys = enum.IntEnum("ApiKeys", [(_upper_snake(row[0]), row[1]) for row in APIS])
ApiKeys.__doc__ = "Kafka API keys that kraft has generated codecs for."


@dataclass(frozen=True)
class ApiInfo:
    key: ApiKeys
    name: str
    request: type
    response: type
    lowest: int
    highest: int
    first_flexible: int | None
    listeners: tuple

    def supports(self, version: int) -> bool:
        return self.lowest <= version <= self.highest

    def is_flexible(self, version: int) -> bool:
        return self.first_flexible is not None and version >= self.first_flexible


#: api key -> ApiInfo
API_INFO: dict[int, ApiInfo] = {
    key: ApiInfo(ApiKeys(key), name, req, resp, lo, hi, ff, listeners)
    for name, key, req, resp, lo, hi, ff, listeners in APIS
}


def api_info(api_key: int) -> ApiInfo:
    try:
        return API_INFO[api_key]
    except KeyError:
        raise KeyError(f"unknown or unsupported api key {api_key}") from None


def request_header_version(api_key: int, api_version: int) -> int:
    return 2 if api_info(api_key).is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == ApiKeys.API_VERSIONS:
        return 0
    return 1 if api_info(api_key).is_flexible(api_version) else 0


def api_versions_response(version: int, listener: str | None = None, *, throttle_time_ms: int = 0,
                          supported_features=(), finalized_features=(), finalized_features_epoch: int = -1,
                          zk_migration_ready: bool = False, only=None) -> ApiVersionsResponse:
    """The ApiVersions answer listing every API (of ``listener``: ``broker``/``controller``;
    of those, only the keys in ``only`` when given: what the server has handlers for) and its range.

    ``supported_features``/``finalized_features`` take ``(name, min, max)`` and
    ``(name, min_level, max_level)`` triples (sent from version 3 on).
    """
    R = ApiVersionsResponse
    keys = [R.ApiVersion(api_key=int(i.key), min_version=i.lowest, max_version=i.highest)
            for i in sorted(API_INFO.values(), key=lambda i: i.key)
            if (listener is None or listener in i.listeners) and (only is None or int(i.key) in only)]
    return R(error_code=0, api_keys=keys, throttle_time_ms=throttle_time_ms,
             supported_features=[R.SupportedFeatureKey(name=n, min_version=a, max_version=b)
                                 for n, a, b in supported_features],
             finalized_features_epoch=finalized_features_epoch,
             finalized_features=[R.FinalizedFeatureKey(name=n, min_version_level=a, max_version_level=b)
                                 for n, a, b in finalized_features],
             zk_migration_ready=zk_migration_ready)


def unsupported_version_response() -> ApiVersionsResponse:
    """What a server sends (at version 0) when a client's ApiVersions version is too new."""
    info = API_INFO[ApiKeys.API_VERSIONS]
    R = ApiVersionsResponse
    return R(error_code=UNSUPPORTED_VERSION,
             api_keys=[R.ApiVersion(api_key=int(info.key), min_version=info.lowest, max_version=info.highest)])


def answer_api_versions(request: ApiVersionsRequest | None, version: int, listener: str | None = None, **kw):
    """``(response, version_to_encode_at)`` for an ApiVersions request of ``version``."""
    info = API_INFO[ApiKeys.API_VERSIONS]
    if not info.supports(version):
        return unsupported_version_response(), 0
    return api_versions_response(version, listener, **kw), version
