"""The generated benchmark log is a history Kafka's image accepts: every record replays.

Why: the replay benchmarks (single process and Spark) fold ``kraft-gen-metadata-log``
output into the image; a record the image refuses (a fence naming a stale broker
epoch, a change to a partition that does not exist) would make them measure an error
path, or nothing.
"""
from __future__ import annotations

from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage, image_records
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.record import decode_records
from kraft_storage.tools import gen_metadata_log as gen


def test_every_generated_record_replays_into_the_image(tmp_path):
    (path,) = gen.write_log(str(tmp_path / "x.log"), 40_000, seed=5, single_file=True, brokers=6,
                            initial_topics=20)
    cols = decode_records(open(path, "rb").read())
    control = cols.is_control()
    delta = MetadataDelta(MetadataImage.EMPTY)
    fences = 0
    for i in range(len(cols)):
        if control[i]:
            continue
        _k, _v, msg = decode_metadata_record(cols.value(i))
        fences += msg.NAME == "BrokerRegistrationChangeRecord"
        delta.replay(msg)
    image = delta.apply(MetadataProvenance(int(cols.offset[-1]), 1, 0, True))
    assert fences > 100
    assert len(image.cluster.brokers) == 6
    assert image.metadata_version() is not None
    assert len(image.topics.topics_by_id) >= 20
    # every broker's epoch is the offset of its latest registration
    assert all(b.epoch >= 0 for b in image.cluster.brokers.values())
    # and the image can be written at its own metadata.version with nothing lost (what a loader
    # does to initialize a publisher, and what a snapshot of it would hold)
    assert len(image_records(image)) > 20
