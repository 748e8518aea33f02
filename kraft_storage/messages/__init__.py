"""Kafka message bodies: generated codecs for metadata records, control records, quorum state.

Modules (generated ones come from ``codegen/``; regenerate with ``python -m codegen``):

* ``runtime``: Reader/Writer of Kafka's primitive types, ``Uuid``, ``MessageError``.
* ``metadata``: the metadata log record classes (apiKey 0-28), native or pure.
* ``framing``: the metadata record frame (``decode_metadata_record`` / ``encode_metadata_record``).
* ``control``: control record key codec, control types, and their bodies.
* ``quorum_state``: ``QuorumStateData`` and the JSON text of the ``quorum-state`` file.
* ``dump``: JSON-safe views used by ``kraft-dump-log``.

Importing this package only loads the runtime; the rest is imported on demand.
"""
from kraft_storage.messages.runtime import ZERO_UUID, MessageError, Uuid  # noqa: F401
