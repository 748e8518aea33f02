"""Checks shared by the sub-image tests (Kafka's ``RecordTestUtils`` for images).

* :func:`image_records` -- what an image writes (``RecordListWriter``), each record checked to
  encode at the version it was written at and to decode to an equal record (so a field the
  version cannot carry fails here, as Kafka's serializer fails);
* :func:`replay_all` -- records (or ApiMessageAndVersion) into a delta, in order;
* :func:`check_all_intermediate_images` -- Kafka's
  ``TestThroughAllIntermediateImagesLeadingToFinalImageHelper``: for every split point and every
  later batch size, applying the records batch by batch from the empty image ends at the
  expected image.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.writer import ImageWriterOptions, RecordListWriter
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages.metadata import decode_metadata_record


def encoded_round_trip(record: ApiMessageAndVersion) -> ApiMessageAndVersion:
    """The record after encoding at its version and decoding back (asserts the two are equal)."""
    api_key, version, message = decode_metadata_record(record.encode())
    assert api_key == record.message.API_KEY and version == record.version
    assert message == record.message, f"{record!r} decodes as {message!r}"
    return ApiMessageAndVersion(message, version)


def image_records(image: Any, metadata_version: MetadataVersion | None = None,
                  loss_handler: Callable[[str], None] | None = None) -> list[ApiMessageAndVersion]:
    """The records ``image.write`` produces for ``metadata_version`` (default: the latest production
    level, Kafka's ``ImageWriterOptions.Builder()`` default), round-tripped through their bytes."""
    writer = RecordListWriter()
    mv = metadata_version if metadata_version is not None else MetadataVersion.LATEST_PRODUCTION
    image.write(writer, ImageWriterOptions(mv, loss_handler))
    return [encoded_round_trip(r) for r in writer.records]


def replay_all(delta: Any, records: Iterable[Any]) -> Any:
    for record in records:
        delta.replay(record.message if isinstance(record, ApiMessageAndVersion) else record)
    return delta


def check_all_intermediate_images(empty: Any, make_delta: Callable[[Any], Any], final_image: Any,
                                  records: Sequence[Any]) -> None:
    """Every way of cutting ``records`` into a first delta and then equal-size batches ends at ``final_image``."""
    n = len(records)
    if n == 0:
        assert make_delta(empty).apply() == final_image
        return
    for first in range(1, n + 1):
        first_image = replay_all(make_delta(empty), records[:first]).apply()
        remaining = n - first
        if remaining == 0:
            assert first_image == final_image, f"after all {n} records in one delta"
            continue
        for batch in range(1, remaining + 1):
            image = first_image
            for i in range(math.ceil(remaining / batch)):
                start = first + i * batch
                image = replay_all(make_delta(image), records[start:start + batch]).apply()
            assert image == final_image, f"first delta of {first} records, then batches of {batch}"
