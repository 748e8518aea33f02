"""Per-message cost of the Raft hot path's wire codec, native vs pure in one run.

    python benchmarks/rpc_codec_bench.py [--n 20000] [--json out.json]

Each step of one replication round trip, timed over ``--n`` repetitions (median of 5
rounds), once in a subprocess with the Cython codecs (``kraft_node._native._rpc_*``)
and once with ``KRAFT_NO_EXTENSIONS=1`` (the pure twins): the core's FetchRequest and
FetchResponse (one batch of one 100 B record, as a lone append sends) through
``wire`` and ``framing`` in both directions.  Hot loops: in the running quorum each
step runs with cold caches between other processes, several times slower (see
BENCHMARKS.md), but the ratio is what the codec change buys.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
from _support import emit_json  # noqa: E402


def measure(n: int) -> dict:
    sys.path.insert(0, REPO)
    from kraft_node.protocol import framing
    from kraft_node.protocol.generated import fetch as g_fetch
    from kraft_node.raft import messages as m
    from kraft_node.raft.io import wire
    from kraft_node.raft.io.kafka_log import decode_raft_batches, encode_batch

    raw = encode_batch(m.Batch(100, 3, (b"x" * 100,), append_time_ms=1))
    req = m.FetchRequest("MkU3OEVBNTcwNTJENDM2Qg", 2, 500, 3, 100, 3, 0, uuid.uuid4(), 99)
    resp = m.FetchResponse(0, 0, 100, m.LeaderIdAndEpoch(1, 3), 0, None, None, decode_raft_batches(raw), ())
    body, ver = wire.request_to_wire(req)
    req_frame = bytes(framing.encode_request(body, ver, 7, "raft-client-2"))[4:]
    rbody = wire.response_to_wire(resp)
    resp_frame = bytes(framing.encode_response(rbody, ver, 7))[4:]
    decoded_resp = framing.decode_response(resp_frame, 1, ver)[1]
    steps = {
        "follower: FetchRequest core -> frame": lambda: framing.encode_request(wire.request_to_wire(req)[0], ver, 7,
                                                                                "raft-client-2"),
        "leader: frame -> FetchRequest core": lambda: wire.request_from_wire(framing.decode_request(req_frame)[1], ver),
        "leader: FetchResponse core -> frame": lambda: framing.encode_response(wire.response_to_wire(resp), ver, 7),
        "follower: frame -> FetchResponse core": lambda: wire.response_from_wire(
            framing.decode_response(resp_frame, 1, ver)[1]),
        "  of which decode_response (codec only)": lambda: framing.decode_response(resp_frame, 1, ver),
        "  of which response_from_wire (batch scan)": lambda: wire.response_from_wire(decoded_resp),
    }
    out = {"implementation": g_fetch.IMPLEMENTATION}
    for name, fn in steps.items():
        fn()
        rounds = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            rounds.append((time.perf_counter() - t0) / n * 1e6)
        out[name] = round(statistics.median(rounds), 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.n)))
        return
    res = {}
    for mode, env in (("native", {}), ("pure", {"KRAFT_NO_EXTENSIONS": "1"})):
        p = subprocess.run([sys.executable, __file__, "--child", "--n", str(args.n)], capture_output=True,
                           text=True, env=dict(os.environ, **env), check=True)
        res[mode] = json.loads(p.stdout)
    table = {k: {"native_us": res["native"][k], "pure_us": res["pure"][k],
                 "pure/native": round(res["pure"][k] / res["native"][k], 2)}
             for k in res["native"] if k != "implementation"}
    doc = {"setup": {"n": args.n, "loadavg": os.getloadavg(), "python": sys.version.split()[0],
                     "implementations": [res["native"]["implementation"], res["pure"]["implementation"]]},
           "us_per_message": table}
    emit_json(doc, args.json)


if __name__ == "__main__":
    main()
