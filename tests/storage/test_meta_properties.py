"""meta.properties: Kafka's files byte for byte, Java Properties escapes, validation."""
import os

import pytest
from conftest import fixture_params
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_storage.meta_properties import (
    KeyOrder,
    MetaProperties,
    MetaPropertiesError,
    MetaPropertiesFile,
    format_properties,
    java_date,
    parse_properties,
    read_meta_properties,
    write_meta_properties,
)


@pytest.mark.parametrize("path", fixture_params("meta.properties"), ids=lambda p: p.parts[-2])
def test_kafka_files_rewrite_byte_for_byte(path):
    data = path.read_bytes()
    f = MetaPropertiesFile.parse(data, str(path))
    assert f.meta.version == 1 and f.meta.node_id == 1 and f.meta.cluster_id
    assert f.to_bytes() == data


def test_jdk_orders(fixtures_dir):
    old = MetaPropertiesFile.parse((fixtures_dir / "kafka-4.0.0-combined-single-node/meta.properties").read_bytes())
    new = MetaPropertiesFile.parse((fixtures_dir / "kafka-4.2-mv29-combined-single-node/meta.properties").read_bytes())
    assert old.order is KeyOrder.JDK17 and new.order is KeyOrder.SORTED
    assert new.meta.directory_id == "Teb3PFb009qvAZgMDEFH4g"


def test_java_date_matches_kafka():
    # Kafka 4.2 fixture: written at 1775471276 s (its bootstrap batch timestamp) in GMT.
    assert java_date(1775471276.073, "GMT") == "Mon Apr 06 10:27:56 GMT 2026"
    assert java_date(0) == "Thu Jan 01 00:00:00 UTC 1970"


keys = st.text(min_size=1, max_size=12).filter(lambda s: s.strip() == s and "\r" not in s)
@settings(max_examples=200, deadline=None)
@given(st.dictionaries(keys, st.text(max_size=20), max_size=6))
def test_escapes_round_trip(props):
    text = format_properties(props, date_line="x").decode()
    assert parse_properties(text) == props
    assert all(ord(c) < 0x80 for c in text)  # everything non-ASCII is \\u-escaped


def test_parse_java_syntax():
    text = "! comment\n# c\n  a = 1\nb:2\nc 3\nd=line\\\n    continued\ne=\\u0041\\t\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "linecontinued", "e": "A\t"}


@pytest.mark.parametrize("text,msg", [
    ("cluster.id=x\nnode.id=1\n", "failed to find version"),
    ("version=1\nnode.id=1\n", "cluster.id was not found"),
    ("version=1\ncluster.id=x\n", "failed to find node.id"),
    ("version=1\ncluster.id=x\nnode.id=one\n", "unable to read node.id"),
    ("version=7\ncluster.id=x\nnode.id=1\n", "unknown meta.properties version 7"),
    ("version=1\ncluster.id=x\nnode.id=1\ndirectory.id=nope\n", "is not a Kafka Uuid"),
])
def test_validation_errors(text, msg):
    with pytest.raises(MetaPropertiesError, match=msg):
        MetaPropertiesFile.parse(text.encode(), "somewhere/meta.properties")


def test_write_is_atomic_and_reads_back(tmp_path):
    meta = MetaProperties(1, "5L6g3nShT-eMCtK--X86sw", 3, "Teb3PFb009qvAZgMDEFH4g", {"extra.key": "v"})
    path = write_meta_properties(str(tmp_path), meta, now_s=1775471276, zone="GMT")
    assert sorted(os.listdir(tmp_path)) == ["meta.properties"]  # no .tmp left behind
    f = read_meta_properties(str(tmp_path))
    assert f.meta == meta and f.date_line == "Mon Apr 06 10:27:56 GMT 2026"
    assert open(path, "rb").read().splitlines()[2:] == [
        b"cluster.id=5L6g3nShT-eMCtK--X86sw", b"directory.id=Teb3PFb009qvAZgMDEFH4g",
        b"extra.key=v", b"node.id=3", b"version=1"]


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(MetaPropertiesError, match="not found .*kraft-storage format"):
        read_meta_properties(str(tmp_path))
