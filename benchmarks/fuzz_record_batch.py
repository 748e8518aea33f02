"""Fuzz job for the native record-batch reader (not run in CI).

    python benchmarks/fuzz_record_batch.py --inputs 1000000 [--seed 1]

Mutates valid batches (bit flips, byte sets, truncations, splices, length
field rewrites, random garbage) and feeds each input to the native scan and
record decoder with every CRC mode.  The native outcome must be an OK or an
error status, never a crash; every 50th input is also run through the pure
twin and the two outcomes must be identical.  Prints a JSON summary.
"""
from __future__ import annotations

import argparse
import json
import random
import struct
import sys
import time

import numpy as np

import kraft_storage._native._batch as native
import kraft_storage._pure._batch as pure
from kraft_storage.record import BATCH_DTYPE, build_batch
from kraft_storage.record.columns import _empty_columns


def outcome(impl, data: bytes, crc_mode: int):
    hdr = np.empty(len(data) // 61 + 2, BATCH_DTYPE)
    s = impl.scan(data, 0, len(data), crc_mode, 0, hdr)
    hdr = hdr[:s[1]]
    plain = hdr[(hdr["attributes"] & 7) == 0]
    cols = _empty_columns(min(int(plain["records_count"].sum()), len(data) // 7 + 1))
    rs = np.ascontiguousarray(plain["position"] + 61)
    re_ = np.ascontiguousarray(plain["position"] + plain["size"])
    d = impl.decode_records(data, plain, rs, re_, None, cols, 0)
    return s, hdr.tobytes(), d, [c[:d[1]].tolist() for c in cols]


def seeds(rng: random.Random) -> list[bytes]:
    out = []
    for n in (1, 3, 17):
        recs = [(None if i % 3 == 0 else b"k%d" % i, b"v" * rng.randint(0, 40), 10**12 + i,
                 [("h", b"x")] if i % 4 == 0 else []) for i in range(n)]
        out.append(build_batch(recs, base_offset=rng.randint(0, 1000)))
    out.append(b"".join(out))
    return out


def mutate(rng: random.Random, base: bytes) -> bytes:
    b = bytearray(base)
    for _ in range(rng.randint(1, 6)):
        k = rng.randrange(7)
        if k == 0 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif k == 1 and b:
            b[rng.randrange(len(b))] = rng.randrange(256)
        elif k == 2 and b:
            del b[rng.randrange(len(b)):]
        elif k == 3:
            i = rng.randrange(len(b) + 1)
            b[i:i] = rng.randbytes(rng.randint(1, 8))
        elif k == 4 and len(b) >= 12:
            struct.pack_into(">i", b, 8, rng.choice([-1, 0, 48, 49, 2**31 - 1, rng.randint(0, 400)]))
        elif k == 5 and len(b) >= 61:
            struct.pack_into(">i", b, 57, rng.choice([-1, 0, 2**31 - 1, rng.randint(0, 50)]))
        elif k == 6 and len(b) > 62:
            i = rng.randrange(61, len(b))
            b[i:i + 5] = b"\xff" * 5
    return bytes(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compare-every", type=int, default=50)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    bases = seeds(rng)
    stats = {"inputs": 0, "ok": 0, "errors": 0, "compared": 0}
    t0 = time.time()
    for i in range(args.inputs):
        data = mutate(rng, rng.choice(bases)) if rng.random() < 0.95 else rng.randbytes(rng.randint(0, 200))
        mode = i % 3
        o = outcome(native, data, mode)
        stats["inputs"] += 1
        if o[0][0] == 0 and o[2][0] == 0:
            stats["ok"] += 1
        else:
            stats["errors"] += 1
        if i % args.compare_every == 0:
            p = outcome(pure, data, mode)
            stats["compared"] += 1
            if p != o:
                print(json.dumps({"mismatch_at_input": i, "seed": args.seed, "data": data.hex()}))
                sys.exit(1)
    stats["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(stats))


if __name__ == "__main__":
    main()
