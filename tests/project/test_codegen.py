"""The committed generated code is exactly what ``python -m codegen`` produces from Kafka's schemas.

The schemas come from ``$KRAFT_KAFKA_SCHEMAS`` or ``$KRAFT_SHARED/kafka-schemas``
(conftest's ``SHARED``); without them these tests fail, they do not skip.
"""
from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from conftest import SHARED

from codegen import REPO_ROOT, default_schemas_dir, generate
from codegen.columns import TEMPLATES, render_template
from codegen.emit import HEADER
from codegen.schema import Versions, snake

#: generated file -> the template it is rendered from (codegen/templates/).
TEMPLATED = {
    "kraft_storage/_pure/_metadata_columns.py": "_metadata_columns.py.tmpl",
    "kraft_storage/_native/_metadata_columns.pyx": "_metadata_columns.pyx.tmpl",
}


@pytest.fixture(scope="module")
def schemas() -> Path:
    root = default_schemas_dir()
    if root is None:
        pytest.fail(f"Kafka schemas not found at {SHARED / 'kafka-schemas'}; set KRAFT_SHARED to the "
                    "shared/ folder (or KRAFT_KAFKA_SCHEMAS to the schema directory)", pytrace=False)
    return root


@pytest.fixture(scope="module")
def generated(schemas) -> dict[str, str]:
    return generate(schemas)


def test_generated_files_are_up_to_date(generated):
    """Byte for byte: what is committed is what the generator writes."""
    assert len(generated) >= 30
    stale = []
    for rel, text in sorted(generated.items()):
        path = REPO_ROOT / rel
        old = path.read_bytes() if path.exists() else b""
        if old != text.encode("utf-8"):
            old_t = old.decode("utf-8", "replace")
            diff = "".join(difflib.unified_diff(old_t.splitlines(True), text.splitlines(True), rel, rel, n=1))
            stale.append(diff[:2000] or f"{rel}: differs in line endings or encoding only")
    assert not stale, "generated code is stale; run `python -m codegen`:\n" + "\n".join(stale)


def test_templated_files_come_from_their_templates(generated):
    """Every template is used, fully filled in, and its text is in the committed file."""
    assert sorted(p.name for p in TEMPLATES.iterdir() if p.name.endswith(".tmpl")) == sorted(TEMPLATED.values())
    for rel, name in TEMPLATED.items():
        text = generated[rel]
        assert "${" not in text, rel
        assert text == (REPO_ROOT / rel).read_bytes().decode("utf-8"), rel
        # each template line that is not a placeholder appears, in order, in the output
        lines = iter(text.split("\n"))
        for line in (TEMPLATES / name).read_text(encoding="utf-8").split("\n"):
            if "$" not in line and line.strip():
                assert any(out == line for out in lines), f"{name}: {line!r} missing from {rel}"


def test_render_template_wants_exactly_its_placeholders():
    name = "_metadata_columns.py.tmpl"
    keys = {"header", "doc", "types", "layouts", "errors", "max_api_key", "decoders", "record_decoders"}
    full = {k: "" for k in keys}
    assert "def decode_rows(" in render_template(name, full)
    with pytest.raises(KeyError):
        render_template(name, {k: "" for k in keys - {"types"}})
    with pytest.raises(KeyError):
        render_template(name, {**full, "typo": ""})


def test_every_schema_is_covered(schemas, generated):
    from codegen.schema import load_dir
    specs = load_dir(schemas)
    files = generated
    everything = "\n".join(files.values())
    for name in specs:
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
