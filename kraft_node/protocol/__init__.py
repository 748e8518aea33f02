"""Kafka RPC messages for kraft: generated request/response classes, headers and framing.

* ``generated/``: one module per API (request + response classes), from Kafka's schemas.
* ``headers``: ``RequestHeader`` (v1/v2) and ``ResponseHeader`` (v0/v1), generated.
* ``api_keys``: the ``ApiKeys`` table of supported versions and ApiVersions helpers.
* ``framing``: size-prefixed request/response frames with the right header versions.
"""
