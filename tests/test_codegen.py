"""The committed generated code is exactly what ``python -m codegen`` produces from Kafka's schemas."""
from __future__ import annotations

import difflib

import pytest

from codegen import REPO_ROOT, default_schemas_dir, generate
from codegen.emit import HEADER
from codegen.schema import Versions, snake

SCHEMAS = default_schemas_dir()


@pytest.mark.skipif(SCHEMAS is None, reason="../shared/kafka-schemas not present")
def test_generated_files_are_up_to_date():
    files = generate(SCHEMAS)
    assert len(files) >= 30
    stale = []
    for rel, text in sorted(files.items()):
        path = REPO_ROOT / rel
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        if old != text:
            diff = "".join(difflib.unified_diff(old.splitlines(True), text.splitlines(True), rel, rel, n=1))
            stale.append(diff[:2000])
    assert not stale, "generated code is stale; run `python -m codegen`:\n" + "\n".join(stale)


@pytest.mark.skipif(SCHEMAS is None, reason="../shared/kafka-schemas not present")
def test_every_schema_is_covered():
    from codegen.schema import load_dir
    specs = load_dir(SCHEMAS)
    files = generate(SCHEMAS)
    everything = "\n".join(files.values())
    for name, spec in specs.items():
        assert f"class {name}(_Base):" in everything, name
    for text in files.values():
        assert text.splitlines()[0] == HEADER.strip()


def test_versions_parse():
    assert 5 in Versions.parse("3+") and 2 not in Versions.parse("3+")
    v = Versions.parse("1-3")
    assert [x for x in range(6) if x in v] == [1, 2, 3]
    assert 0 not in Versions.parse("none") and 7 in Versions.parse("7") and 8 not in Versions.parse("7")


def test_snake_names():
    assert snake("PartitionId") == "partition_id"
    assert snake("IsMigratingZkBroker") == "is_migrating_zk_broker"
    assert snake("Isr") == "isr"
    assert snake("KRaftVersionFeature") == "k_raft_version_feature"
    assert snake("ThrottleTimeMs") == "throttle_time_ms"
