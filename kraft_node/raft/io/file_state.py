"""``FileQuorumStateStore``: the durable election state in Kafka's ``quorum-state`` file.

The file sits in the metadata partition directory
(``<metadata.log.dir>/__cluster_metadata-0/quorum-state``) and holds one line
of Kafka's ``QuorumStateData`` JSON (see
:mod:`kraft_storage.messages.quorum_state` for the exact text).  Mapping of
the core's :class:`~kraft_node.raft.roles.ElectionState`:

=====================  ============================================
ElectionState          QuorumStateData
=====================  ============================================
``epoch``              ``leaderEpoch``
``leader_id`` (-1)     ``leaderId`` (-1 when no leader is known)
``voted_key.id``       ``votedId`` (-1 when no vote)
``voted_key.dir``      ``votedDirectoryId`` (data_version 1 only)
(static voter set)     ``currentVoters`` (data_version 0 only)
--                     ``clusterId`` "" and ``appliedOffset`` 0, as Kafka writes them
=====================  ============================================

Kafka writes data_version 0 while ``kraft.version`` is 0 (a static
``controller.quorum.voters`` quorum) and 1 once the quorum is dynamic
(KIP-853); this store does the same, chosen by the caller.

Why durable: a vote and a leadership claim must survive a crash, or a
restarted voter could vote twice in an epoch.  :meth:`write` writes a temp
file, fsyncs it, renames it over the old file atomically, then fsyncs the
directory, before it returns; the core only sends messages that depend on the
new state after that (see ``RaftCore`` rule 1).
"""
from __future__ import annotations

import os
import uuid
from typing import Iterable

from kraft_node.raft.messages import ReplicaKey
from kraft_node.raft.roles import ElectionState
from kraft_storage.messages.quorum_state import QuorumStateData, read_quorum_state_file, write_quorum_state_file
from kraft_storage.messages.runtime import ZERO_UUID, MessageError, Uuid

__all__ = ["FileQuorumStateStore", "QUORUM_STATE_FILE", "to_quorum_state_data", "from_quorum_state_data"]

QUORUM_STATE_FILE = "quorum-state"


def _to_uuid(u: Uuid | None) -> uuid.UUID | None:
    if u is None or u == ZERO_UUID:
        return None
    return uuid.UUID(bytes=u.bytes)


def _to_kafka_uuid(u: uuid.UUID | None) -> Uuid:
    return ZERO_UUID if u is None else Uuid(u.bytes)


def to_quorum_state_data(state: ElectionState, voter_ids: Iterable[int], data_version: int) -> QuorumStateData:
    voted = state.voted_key
    data = QuorumStateData(leader_id=state.leader_id if state.leader_id >= 0 else -1,
                           leader_epoch=state.epoch, voted_id=voted.id if voted is not None else -1)
    if data_version == 0:
        data.cluster_id = ""
        data.applied_offset = 0
        data.current_voters = [QuorumStateData.Voter(voter_id=v) for v in sorted(voter_ids)]
    else:
        data.voted_directory_id = _to_kafka_uuid(voted.directory_id if voted is not None else None)
    return data


def from_quorum_state_data(data: QuorumStateData, data_version: int) -> ElectionState:
    voted = None
    if data.voted_id >= 0:
        voted = ReplicaKey(data.voted_id, _to_uuid(data.voted_directory_id) if data_version >= 1 else None)
    return ElectionState(max(data.leader_epoch, 0), data.leader_id if data.leader_id >= 0 else -1, voted)


class FileQuorumStateStore:
    """QuorumStateStore over ``<partition dir>/quorum-state`` (see the module doc)."""

    def __init__(self, directory: str, voter_ids: Iterable[int] = (), data_version: int = 0):
        if data_version not in (0, 1):
            raise ValueError(f"quorum-state data_version {data_version} is not 0 or 1")
        self.directory = os.fspath(directory)
        self.path = os.path.join(self.directory, QUORUM_STATE_FILE)
        self.voter_ids = tuple(sorted(voter_ids))
        self.data_version = data_version
        self.writes = 0

    def read(self) -> ElectionState | None:
        """The stored state, or None when there is no file yet (a fresh node)."""
        if not os.path.exists(self.path):
            return None
        try:
            data, version = read_quorum_state_file(self.path)
        except (MessageError, UnicodeDecodeError) as exc:
            raise MessageError(f"cannot read the election state: {exc}") from None
        return from_quorum_state_data(data, version)

    def read_data(self) -> tuple[QuorumStateData, int] | None:
        """The raw file contents (for tools and tests)."""
        if not os.path.exists(self.path):
            return None
        return read_quorum_state_file(self.path)

    def write(self, state: ElectionState) -> None:
        os.makedirs(self.directory, exist_ok=True)
        # temp file, fsync, rename, fsync the directory (kraft_storage.fileio.atomic_write)
        write_quorum_state_file(self.path, to_quorum_state_data(state, self.voter_ids, self.data_version),
                                self.data_version)
        self.writes += 1

    def __repr__(self) -> str:
        return f"FileQuorumStateStore({self.path!r}, data_version={self.data_version})"
