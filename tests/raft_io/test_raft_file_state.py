"""FileQuorumStateStore: Kafka's quorum-state file <-> the core's ElectionState."""
from __future__ import annotations

import os
import shutil
import uuid

import pytest
from conftest import fixture_params
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_node.raft.io.file_state import FileQuorumStateStore
from kraft_node.raft.messages import ReplicaKey
from kraft_node.raft.roles import ElectionState

FIXTURE_FILES = fixture_params("__cluster_metadata-0/quorum-state")


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: str(p).split("/")[-3])
def test_reads_kafka_fixture_and_rewrites_it_byte_for_byte(tmp_path, path):
    shutil.copy(path, tmp_path / "quorum-state")
    store = FileQuorumStateStore(str(tmp_path), voter_ids=[1], data_version=0)
    st_ = store.read()
    original = open(path, "rb").read()
    assert st_.leader_id == 1 and st_.voted_key is None
    assert f'"leaderEpoch":{st_.epoch},'.encode() in original
    store.write(st_)
    assert open(tmp_path / "quorum-state", "rb").read() == original


def test_missing_file_reads_none(tmp_path):
    assert FileQuorumStateStore(str(tmp_path / "x")).read() is None


def test_v0_text_is_kafkas(tmp_path):
    store = FileQuorumStateStore(str(tmp_path), voter_ids=[3, 1, 2], data_version=0)
    store.write(ElectionState(5, -1, ReplicaKey(2, uuid.uuid4())))
    assert open(tmp_path / "quorum-state").read() == (
        '{"clusterId":"","leaderId":-1,"leaderEpoch":5,"votedId":2,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}')
    # v0 cannot carry the directory id: it reads back as "any directory"
    assert store.read() == ElectionState(5, -1, ReplicaKey(2, None))
    assert not os.path.exists(tmp_path / "quorum-state.tmp")


def test_corrupt_file_gives_clear_error(tmp_path):
    (tmp_path / "quorum-state").write_text('{"leaderId":1')
    with pytest.raises(Exception, match="quorum-state"):
        FileQuorumStateStore(str(tmp_path)).read()


keys = st.one_of(st.none(), st.builds(ReplicaKey, st.integers(0, 2 ** 31 - 1),
                                      st.one_of(st.none(), st.uuids())))


@settings(max_examples=60, deadline=None)
@given(epoch=st.integers(0, 2 ** 31 - 1), leader=st.integers(-1, 2 ** 31 - 1), voted=keys,
       version=st.sampled_from([0, 1]))
def test_roundtrip(tmp_path_factory, epoch, leader, voted, version):
    d = tmp_path_factory.mktemp("qs")
    store = FileQuorumStateStore(str(d), voter_ids=[1, 2, 3], data_version=version)
    s = ElectionState(epoch, leader, voted)
    store.write(s)
    back = FileQuorumStateStore(str(d)).read()
    if version == 0 and voted is not None:
        s = ElectionState(epoch, leader, ReplicaKey(voted.id, None))
    assert back == s
