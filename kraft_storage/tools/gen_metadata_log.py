"""Generate a realistic, deterministic multi-million-record KRaft metadata log.

``kraft-gen-metadata-log --records 10000000 --seed 1 --out /tmp/gen10m`` writes
``/tmp/gen10m/__cluster_metadata-0/<20-digit base offset>.log`` segments (rolled
at ``--segment-bytes``, 1 GiB by default), or one file with ``--file``.

What the log holds (a cluster's history, as a KRaft controller writes it):

* offset 0: a LeaderChange control record (the first Raft leader), then the
  bootstrap: FeatureLevelRecord ``metadata.version`` 3.7-IV2 (the first with the log
  directories a v3 registration carries), every broker's
  RegisterBrokerRecord (v3: endpoint, features, log dir) and its unfencing;
  the initial topics, each a TopicRecord, its PartitionRecords (replication
  factor 3, leader = first replica) and a ConfigRecord.
* then a stream of events: NoOpRecords (the controller's heartbeat), ISR
  shrinks and expands and partition leader changes (PartitionChangeRecord),
  brokers being fenced and unfenced (BrokerRegistrationChangeRecord) and
  re-registering after a restart (RegisterBrokerRecord with a new
  incarnation id and broker epoch), topic config changes (ConfigRecord), and
  new topics with their partitions.  Every event refers to a topic and
  partition that exist at that point, ISRs are subsets of the partition's
  replicas, a broker epoch is the offset of the RegisterBrokerRecord that set
  it (as in Kafka), and a fence or unfence names the broker's current epoch.
* Raft leader elections: at some chunk boundaries the partition leader epoch
  of the batches goes up and a LeaderChange control batch is written.

Why it is fast (30M records in tens of seconds): each distinct record
*shape* is encoded once by the generated codecs with sentinel values in its
variable fields; the sentinels' byte positions are found in the encoding;
records are then produced column-wise: the ``_frame.gather`` kernel copies
each record's template into place and numpy writes the big-endian ids,
epochs, uuids and fixed-width name digits at the known positions.  The
framed values go to ``build_batches`` (one native call per chunk).  Every
template is checked to decode back to its message before use.

Deterministic: the same ``seed``, ``records`` and options give the same
bytes (numpy's PCG64 with fixed chunking; timestamps start at a fixed time).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from dataclasses import field as dc_field

import numpy as np

from kraft_storage.accel import load
from kraft_storage.messages import metadata as m
from kraft_storage.messages.control import (
    ControlRecordType,
    LeaderChangeMessage,
    encode_control_key,
    encode_control_value,
)
from kraft_storage.messages.framing import decode_metadata_record, encode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record import build_batch, build_batches

_f = load("_frame")

BASE_TIME_MS = 1_767_225_600_000   # 2026-01-01T00:00:00Z
DEFAULT_SEGMENT_BYTES = 1 << 30
CHUNK_RECORDS = 1 << 20            # part of the determinism contract: do not change lightly
DEFAULT_RECORDS_PER_BATCH = 100

# -- templates ---------------------------------------------------------------

_S32 = [0x7E5A3C00 + j for j in range(8)]          # int32 sentinels
_S64 = [0x6D4B2A196D4B2A00 + j for j in range(4)]  # int64 sentinels
_SUUID = [bytes([0xE7] * 15 + [0x10 + j]) for j in range(4)]
_SDIGITS = ["97531864", "86420975"]                # 8 ASCII digit sentinels


@dataclass
class Template:
    """One record shape: its framed value and where each variable field sits."""
    name: str
    value: bytes
    patches: dict   # field -> (offset, kind) with kind in i32, i64, uuid, d8 (8 ascii digits)


def _find(value: bytes, needle: bytes, what: str) -> int:
    i = value.find(needle)
    if i < 0 or value.find(needle, i + 1) >= 0:
        raise AssertionError(f"sentinel of {what} not found exactly once in the template")
    return i


def _template(name: str, msg, version: int, fields: dict) -> Template:
    value = encode_metadata_record(msg, version)
    patches = {}
    for field, (kind, j) in fields.items():
        if kind == "i32":
            needle = _S32[j].to_bytes(4, "big")
        elif kind == "i64":
            needle = _S64[j].to_bytes(8, "big")
        elif kind == "uuid":
            needle = _SUUID[j]
        else:
            needle = _SDIGITS[j].encode()
        patches[field] = (_find(value, needle, f"{name}.{field}"), kind)
    decode_metadata_record(value)  # the template must be a valid record
    return Template(name, value, patches)


def _uuid(j: int) -> Uuid:
    return Uuid(int.from_bytes(_SUUID[j], "big"))


def build_templates() -> list[Template]:
    S, L = _S32, _S64
    features = [m.RegisterBrokerRecord.BrokerFeature(name="metadata.version", min_supported_version=1,
                                                     max_supported_version=14)]
    endpoint = m.RegisterBrokerRecord.BrokerEndpoint(
        name="PLAINTEXT", host=f"broker-{_SDIGITS[0]}.kraft.internal", port=9092, security_protocol=0)
    t = [
        _template("noop", m.NoOpRecord(), 0, {}),
        _template("isr2", m.PartitionChangeRecord(partition_id=S[0], topic_id=_uuid(0), isr=[S[1], S[2]]), 0,
                  {"partition": ("i32", 0), "topic_id": ("uuid", 0), "r0": ("i32", 1), "r1": ("i32", 2)}),
        _template("isr3", m.PartitionChangeRecord(partition_id=S[0], topic_id=_uuid(0),
                                                  isr=[S[1], S[2], S[3]]), 0,
                  {"partition": ("i32", 0), "topic_id": ("uuid", 0), "r0": ("i32", 1), "r1": ("i32", 2),
                   "r2": ("i32", 3)}),
        _template("leader", m.PartitionChangeRecord(partition_id=S[0], topic_id=_uuid(0), leader=S[4]), 0,
                  {"partition": ("i32", 0), "topic_id": ("uuid", 0), "leader": ("i32", 4)}),
        _template("fence", m.BrokerRegistrationChangeRecord(broker_id=S[0], broker_epoch=L[0], fenced=1), 1,
                  {"broker": ("i32", 0), "epoch": ("i64", 0)}),
        _template("unfence", m.BrokerRegistrationChangeRecord(broker_id=S[0], broker_epoch=L[0], fenced=-1), 1,
                  {"broker": ("i32", 0), "epoch": ("i64", 0)}),
        _template("register", m.RegisterBrokerRecord(
            broker_id=S[0], incarnation_id=_uuid(0), broker_epoch=L[0], end_points=[endpoint],
            features=features, rack=None, fenced=True, in_controlled_shutdown=False,
            log_dirs=[_uuid(1)]), 3,
            {"broker": ("i32", 0), "incarnation": ("uuid", 0), "epoch": ("i64", 0), "log_dir": ("uuid", 1),
             "host": ("d8", 0)}),
        _template("topic", m.TopicRecord(name=f"topic-{_SDIGITS[0]}", topic_id=_uuid(0)), 0,
                  {"topic_id": ("uuid", 0), "topic_name": ("d8", 0)}),
        _template("partition", m.PartitionRecord(
            partition_id=S[0], topic_id=_uuid(0), replicas=[S[1], S[2], S[3]], isr=[S[5], S[6], S[7]],
            removing_replicas=[], adding_replicas=[], leader=S[4], leader_recovery_state=0, leader_epoch=0,
            partition_epoch=0), 0,
            {"partition": ("i32", 0), "topic_id": ("uuid", 0), "r0": ("i32", 1), "r1": ("i32", 2),
             "r2": ("i32", 3), "i0": ("i32", 5), "i1": ("i32", 6), "i2": ("i32", 7), "leader": ("i32", 4)}),
    ]
    for name, value in CONFIGS:
        t.append(_template(f"config:{name}={value}", m.ConfigRecord(
            resource_type=2, resource_name=f"topic-{_SDIGITS[0]}", name=name, value=value), 0,
            {"topic_name": ("d8", 0)}))
    return t


#: Topic configs the history sets (each is one template).
CONFIGS = [("retention.ms", "604800000"), ("retention.ms", "86400000"), ("cleanup.policy", "compact"),
           ("min.insync.replicas", "2"), ("segment.bytes", "536870912"), ("max.message.bytes", "2097152")]

# -- the history -------------------------------------------------------------

# Event kinds of the steady state and their weights.
EVENTS = ["noop", "isr_shrink", "isr_expand", "leader", "fence", "unfence", "register", "config",
          "create_topic"]
WEIGHTS = np.array([0.40, 0.22, 0.22, 0.08, 0.015, 0.015, 0.004, 0.025, 0.001])
PARTITION_CHOICES = np.array([1, 3, 6, 12, 24, 50])


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: deterministic, well-spread 64-bit ids from counters."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _uuid_bytes(a: np.ndarray, salt: int) -> np.ndarray:
    """(n, 16) uint8 Uuids from integer ids (never the zero uuid)."""
    hi = _mix64(a * 2 + salt * 0x1000003)
    lo = _mix64(a * 2 + 1 + salt * 0x1000003) | np.uint64(1)
    out = np.empty((len(a), 16), np.uint8)
    out[:, :8] = hi.astype(">u8").view(np.uint8).reshape(-1, 8)
    out[:, 8:] = lo.astype(">u8").view(np.uint8).reshape(-1, 8)
    return out


@dataclass
class ClusterState:
    brokers: int
    partitions: list          # partition count of each topic, index = topic number
    next_offset: int = 0
    epoch: int = 1            # Raft leader epoch
    time_ms: int = BASE_TIME_MS
    #: each broker's epoch: the offset of its latest RegisterBrokerRecord (-1 before it registers)
    broker_epochs: np.ndarray = dc_field(default_factory=lambda: np.zeros(0, np.int64))


class Patcher:
    """Writes per-record field values into the gathered record bytes."""

    def __init__(self, data: np.ndarray, starts: np.ndarray):
        self.data = data
        self.starts = starts

    def put(self, tmpl: Template, rows: np.ndarray, field: str, values: np.ndarray) -> None:
        off, kind = tmpl.patches[field]
        pos = self.starts[rows] + off
        if kind == "i32":
            raw = np.asarray(values, ">i4").view(np.uint8).reshape(-1, 4)
        elif kind == "i64":
            raw = np.asarray(values, ">i8").view(np.uint8).reshape(-1, 8)
        elif kind == "uuid":
            raw = values
        else:  # 8 ASCII digits
            v = np.asarray(values, np.int64)
            raw = np.stack([(v // 10 ** (7 - k)) % 10 + 48 for k in range(8)], axis=1).astype(np.uint8)
        for k in range(raw.shape[1]):
            self.data[pos + k] = raw[:, k]


class Generator:
    def __init__(self, seed: int = 0, brokers: int = 12, initial_topics: int = 100):
        if brokers < 3:
            raise ValueError("need at least 3 brokers (replication factor 3)")
        self.seed = seed
        self.templates = {t.name: t for t in build_templates()}
        self.order = list(self.templates)
        self.pool = np.frombuffer(b"".join(t.value for t in self.templates.values()), np.uint8)
        lens = np.array([len(t.value) for t in self.templates.values()], np.int64)
        self.tmpl_pos = np.concatenate([[0], np.cumsum(lens)[:-1]])
        self.tmpl_len = lens.astype(np.int32)
        rng = np.random.default_rng([seed, 0])
        self.state = ClusterState(brokers, rng.choice(PARTITION_CHOICES, initial_topics).tolist())
        self.initial_topics = initial_topics

    # -- events -> records --
    def _bootstrap_events(self):
        s = self.state
        kinds = (["register"] * s.brokers + ["unfence"] * s.brokers + ["create_topic"] * self.initial_topics)
        brokers = list(range(s.brokers)) * 2 + [0] * self.initial_topics
        topics = [0] * (2 * s.brokers) + list(range(self.initial_topics))
        return (np.array([EVENTS.index(k) for k in kinds], np.int8), np.array(brokers, np.int64),
                np.array(topics, np.int64), True)

    def _records_for(self, kinds, brokers, topics, new_topic_flags, rng):
        """Expand events into records: (template index, fields...) columns."""
        s = self.state
        ev_create = kinds == EVENTS.index("create_topic")
        nparts = np.zeros(len(kinds), np.int64)
        if new_topic_flags:
            nparts[ev_create] = np.asarray(s.partitions, np.int64)[topics[ev_create]]
        else:
            n_new = int(ev_create.sum())
            newp = rng.choice(PARTITION_CHOICES, n_new)
            topics = topics.copy()
            topics[ev_create] = len(s.partitions) + np.arange(n_new)
            nparts[ev_create] = newp
            s.partitions.extend(newp.tolist())
        counts = np.where(ev_create, nparts + 2, 1)  # topic + partitions + one config
        ev = np.repeat(np.arange(len(kinds)), counts)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        sub = np.arange(len(ev)) - first[ev]
        return ev, sub, nparts, topics

    def chunk(self, n_events: int, rng, bootstrap: bool = False):
        """One chunk: (values data, value offsets, timestamps, event kinds per record)."""
        s = self.state
        T = self.templates
        if bootstrap:
            kinds, brokers, topics, fixed = self._bootstrap_events()
        else:
            fixed = False
            kinds = rng.choice(len(EVENTS), n_events, p=WEIGHTS / WEIGHTS.sum()).astype(np.int8)
            brokers = rng.integers(0, s.brokers, n_events)
            # events refer to topics that exist when they happen
            exist = len(s.partitions) + np.cumsum(kinds == EVENTS.index("create_topic")) - (
                kinds == EVENTS.index("create_topic"))
            topics = (rng.random(n_events) * exist).astype(np.int64)
        ev, sub, nparts, topics = self._records_for(kinds, brokers, topics, fixed, rng)
        n = len(ev)
        rk = kinds[ev]
        rt = topics[ev]
        parts = np.asarray(s.partitions, np.int64)
        # template of every record
        names = np.array(self.order)
        tix = {name: i for i, name in enumerate(self.order)}
        tmpl = np.empty(n, np.int32)
        simple = {"noop": "noop", "isr_expand": "isr3", "isr_shrink": "isr2", "leader": "leader",
                  "fence": "fence", "unfence": "unfence", "register": "register"}
        for ek, tn in simple.items():
            tmpl[rk == EVENTS.index(ek)] = tix[tn]
        cfg_choice = rng.integers(0, len(CONFIGS), n)
        cfg_tix = np.array([tix[f"config:{a}={b}"] for a, b in CONFIGS], np.int32)
        is_cfg = rk == EVENTS.index("config")
        tmpl[is_cfg] = cfg_tix[cfg_choice[is_cfg]]
        is_new = rk == EVENTS.index("create_topic")
        np_rec = nparts[ev]
        tmpl[is_new & (sub == 0)] = tix["topic"]
        is_prec = is_new & (sub >= 1) & (sub <= np_rec)
        tmpl[is_prec] = tix["partition"]
        is_ncfg = is_new & (sub == np_rec + 1)
        tmpl[is_ncfg] = cfg_tix[cfg_choice[is_ncfg]]
        # bytes: copy each record's template into place
        data, off, _v, _nn = _f.gather(self.pool, self.tmpl_pos[tmpl], self.tmpl_len[tmpl])
        pt = Patcher(data, off[:-1].astype(np.int64))
        # per-record fields
        partition = np.where(is_prec, sub - 1,
                             (rng.random(n) * parts[np.minimum(rt, len(parts) - 1)]).astype(np.int64))
        h = (_mix64(rt) % np.uint64(s.brokers)).astype(np.int64)
        reps = [(h + partition + j) % s.brokers for j in range(3)]
        drop = rng.integers(0, 3, n)
        offsets = s.next_offset + np.arange(n, dtype=np.int64)
        for name in ("isr2", "isr3", "leader", "partition"):
            rows = np.flatnonzero(tmpl == tix[name])
            if not len(rows):
                continue
            tp = T[name]
            pt.put(tp, rows, "partition", partition[rows])
            pt.put(tp, rows, "topic_id", _uuid_bytes(rt[rows], self.seed))
            if name == "isr2":
                keep = [np.where(drop[rows] <= 0, reps[1][rows], reps[0][rows]),
                        np.where(drop[rows] <= 1, reps[2][rows], reps[1][rows])]
                pt.put(tp, rows, "r0", keep[0])
                pt.put(tp, rows, "r1", keep[1])
            elif name in ("isr3", "partition"):
                for j in range(3):
                    pt.put(tp, rows, f"r{j}", reps[j][rows])
                if name == "partition":
                    for j in range(3):
                        pt.put(tp, rows, f"i{j}", reps[j][rows])
                    pt.put(tp, rows, "leader", reps[0][rows])
            else:
                pt.put(tp, rows, "leader", np.choose(drop[rows], [r[rows] for r in reps]))
        # broker epochs: a registration's is its own offset; a fence or unfence names the epoch of
        # the broker's latest registration (Kafka's ClusterDelta refuses any other).  In log order:
        # registrations are rare (0.4% of events), so a plain loop over these rows is cheap.
        if len(s.broker_epochs) < s.brokers:
            s.broker_epochs = np.concatenate([s.broker_epochs,
                                              np.full(s.brokers - len(s.broker_epochs), -1, np.int64)])
        life = np.flatnonzero(np.isin(tmpl, [tix["fence"], tix["unfence"], tix["register"]]))
        life_epochs = np.empty(len(life), np.int64)
        register = tix["register"]
        for k, (row, t, b) in enumerate(zip(life.tolist(), tmpl[life].tolist(), brokers[ev[life]].tolist())):
            if t == register:
                s.broker_epochs[b] = offsets[row]
            life_epochs[k] = s.broker_epochs[b]
        epoch_of_row = np.zeros(n, np.int64)
        epoch_of_row[life] = life_epochs
        for name in ("fence", "unfence", "register"):
            rows = np.flatnonzero(tmpl == tix[name])
            if not len(rows):
                continue
            tp = T[name]
            b = brokers[ev[rows]]
            pt.put(tp, rows, "broker", b)
            pt.put(tp, rows, "epoch", epoch_of_row[rows])
            if name == "register":
                pt.put(tp, rows, "incarnation", _uuid_bytes(offsets[rows], self.seed + 1))
                pt.put(tp, rows, "log_dir", _uuid_bytes(b, self.seed + 2))
                pt.put(tp, rows, "host", b)
        rows = np.flatnonzero(tmpl == tix["topic"])
        if len(rows):
            pt.put(T["topic"], rows, "topic_id", _uuid_bytes(rt[rows], self.seed))
            pt.put(T["topic"], rows, "topic_name", rt[rows])
        for ci in cfg_tix.tolist():
            rows = np.flatnonzero(tmpl == ci)
            if len(rows):
                pt.put(T[self.order[ci]], rows, "topic_name", rt[rows])
        # time: events are tens of ms apart; records of one event share a timestamp
        gaps = rng.integers(0, 60, len(kinds)).astype(np.int64)
        ev_time = s.time_ms + np.cumsum(gaps)
        ts = ev_time[ev]
        s.time_ms = int(ev_time[-1]) if len(ev_time) else s.time_ms
        return data, off.astype(np.int64), ts, names[tmpl]

    # -- records -> batches --
    def leader_change_batch(self) -> bytes:
        s = self.state
        s.epoch += 1 if s.next_offset else 0
        leader = int(_mix64(np.array([s.epoch + self.seed]))[0] % np.uint64(3))
        voters = [LeaderChangeMessage.Voter(voter_id=i) for i in range(3)]
        body = LeaderChangeMessage(version=0, leader_id=leader, voters=voters, granting_voters=voters[:2])
        b = build_batch([(encode_control_key(ControlRecordType.LEADER_CHANGE),
                          encode_control_value(ControlRecordType.LEADER_CHANGE, body), s.time_ms)],
                        base_offset=s.next_offset, partition_leader_epoch=s.epoch, is_control=True)
        s.next_offset += 1
        return b

    def batches(self, records: int, records_per_batch: int = DEFAULT_RECORDS_PER_BATCH,
                election_probability: float = 0.3):
        """Yield (bytes, batch positions, records in it) chunks holding exactly ``records`` records."""
        s = self.state
        left = records
        chunk_no = 0
        while left > 0:
            rng = np.random.default_rng([self.seed, 1, chunk_no])
            parts = []
            if chunk_no == 0 or rng.random() < election_probability:
                cb = self.leader_change_batch()
                parts.append((cb, np.zeros(1, np.int64), 1))
                left -= 1
            if chunk_no == 0 and left > 0:
                fb = build_batch([(None, encode_metadata_record(
                    m.FeatureLevelRecord(name="metadata.version", feature_level=17), 0), s.time_ms)],
                    base_offset=s.next_offset, partition_leader_epoch=s.epoch)
                s.next_offset += 1
                parts.append((fb, np.zeros(1, np.int64), 1))
                left -= 1
            if left > 0:
                data, off, ts, _names = self.chunk(min(left, CHUNK_RECORDS), rng, bootstrap=chunk_no == 0)
                k = min(len(off) - 1, left)
                out, pos = build_batches((data, off[:k + 1]), timestamps=ts[:k],
                                         records_per_batch=records_per_batch, base_offset=s.next_offset,
                                         partition_leader_epoch=s.epoch, return_positions=True)
                s.next_offset += k
                left -= k
                parts.append((out, pos, k))
            yield from parts
            chunk_no += 1


def _segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def write_log(out: str, records: int, *, seed: int = 0, brokers: int = 12, initial_topics: int = 100,
              records_per_batch: int = DEFAULT_RECORDS_PER_BATCH, segment_bytes: int = DEFAULT_SEGMENT_BYTES,
              single_file: bool = False, progress: bool = False) -> list[str]:
    """Write the log; return the files written.  ``out`` is a directory, or the file when ``single_file``."""
    if records <= 0:
        raise ValueError("records must be positive")
    gen = Generator(seed, brokers, initial_topics)
    files: list[str] = []
    bar = None
    if progress:
        try:
            from tqdm import tqdm
            bar = tqdm(total=records, unit="rec", unit_scale=True, desc="generating")
        except ImportError:  # progress is a nicety
            bar = None
    if single_file:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fh = open(out, "wb")
        files.append(out)
        seg_dir = None
    else:
        seg_dir = os.path.join(out, "__cluster_metadata-0")
        os.makedirs(seg_dir, exist_ok=True)
        fh = None
    size = 0
    try:
        for data, pos, n in gen.batches(records, records_per_batch):
            mv = memoryview(data)
            bounds = np.append(pos, len(data))
            a = 0
            while a < len(pos):
                if seg_dir is None:
                    fh.write(mv)
                    break
                if fh is None or size >= segment_bytes:  # roll: name the segment by its first offset
                    if fh is not None:
                        fh.close()
                    base = int.from_bytes(mv[bounds[a]:bounds[a] + 8], "big")
                    path = os.path.join(seg_dir, _segment_name(base))
                    fh = open(path, "wb")
                    files.append(path)
                    size = 0
                # the batches that still fit (Kafka rolls when size + batch > segment.bytes)
                b = int(np.searchsorted(bounds, bounds[a] + (segment_bytes - size), "right")) - 1
                if b <= a:
                    if size > 0:
                        size = segment_bytes
                        continue
                    b = a + 1  # one batch larger than a segment still gets written
                fh.write(mv[bounds[a]:bounds[b]])
                size += int(bounds[b] - bounds[a])
                a = b
                if a < len(pos):
                    size = segment_bytes
            if bar is not None:
                bar.update(n)
    finally:
        if fh is not None:
            fh.close()
        if bar is not None:
            bar.close()
    return files


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="kraft-gen-metadata-log", description=__doc__.split("\n\n")[0])
    p.add_argument("--records", "-n", type=lambda s: int(float(s)), default=1_000_000,
                   help="records to write (accepts 1e6, 10e6, 30e6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", "-o", required=True, help="output directory (or file with --file)")
    p.add_argument("--file", action="store_true", help="write one segment file at --out")
    p.add_argument("--brokers", type=int, default=12)
    p.add_argument("--initial-topics", type=int, default=100)
    p.add_argument("--records-per-batch", type=int, default=DEFAULT_RECORDS_PER_BATCH)
    p.add_argument("--segment-bytes", type=int, default=DEFAULT_SEGMENT_BYTES)
    p.add_argument("--quiet", "-q", action="store_true")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    files = write_log(a.out, a.records, seed=a.seed, brokers=a.brokers, initial_topics=a.initial_topics,
                      records_per_batch=a.records_per_batch, segment_bytes=a.segment_bytes,
                      single_file=a.file, progress=not a.quiet and sys.stderr.isatty())
    dt = time.perf_counter() - t0
    total = sum(os.path.getsize(f) for f in files)
    if not a.quiet:
        print(f"wrote {a.records} records, {total} bytes in {len(files)} file(s) in {dt:.1f}s: "
              f"{', '.join(files[:3])}{' ...' if len(files) > 3 else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
