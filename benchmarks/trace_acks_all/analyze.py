"""Line up the acks=all round events written by ``sitecustomize.py`` (see its docstring).

    python benchmarks/trace_acks_all/analyze.py DIR [--topic T]

The leader is the process with the most appends (of ``--topic``, default: any).  Per append it
finds: the Produce's arrival (the last ``recv`` before the append), the server's flush after it
(the follower fetch answers written), each follower's next Fetch at or past the new end, the
purgatory's answer, and the next Produce's arrival.  Prints p50/p90/p99/max in ms of each step,
the leader's CPU (thread time) for the two in-process steps, the share of wall time spent in
long rounds (a record's latency is the rest of the round in flight plus its own round: long
rounds weigh as much as they last), each follower's apply time and each process's GC pauses
after the leader's first append (the start's collections are not the rounds').
"""
import argparse
import glob
import os


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--topic", default=None)
    args = ap.parse_args()
    traces = {}
    for f in glob.glob(os.path.join(args.dir, "trace.*")):
        rows = [line.split() for line in open(f) if line.strip()]
        if rows:
            traces[f.rsplit(".", 1)[1]] = rows

    def appends(rows):
        return [(i, r) for i, r in enumerate(rows) if r[2] == "append" and (args.topic is None or r[3] == args.topic)]
    if not traces:
        raise SystemExit(f"no traces in {args.dir} (was KRAFT_ACKS_TRACE_DIR set for the brokers?)")
    leader = max(traces, key=lambda k: len(appends(traces[k])))
    rows = traces[leader]
    apps = appends(rows)
    fetches = {}
    for r in rows:
        if r[2] == "f_in":
            fetches.setdefault(r[3], []).append((int(r[0]), int(r[5])))
    steps = {k: [] for k in ("produce in -> appended", "appended -> fetch answers flushed",
                             "flushed -> first follower fetch in", "flushed -> last follower fetch in",
                             "last follower fetch in -> produce answered", "produce answered -> next produce in",
                             "round (produce in -> next produce in)", "leader CPU produce in -> appended",
                             "leader CPU appended -> flushed")}

    def back(j, name):
        while j >= 0 and rows[j][2] != name:
            j -= 1
        return j

    def fwd(j, name):
        while j < len(rows) and rows[j][2] != name:
            j += 1
        return j
    for n, (j, r) in enumerate(apps[:-1]):
        t_app, off = int(r[0]), int(r[4])
        k_in, k_fl = back(j, "recv"), fwd(j, "flush")
        k_next = back(apps[n + 1][0], "recv")
        done = next((int(x[0]) for x in rows[j:j + 400] if x[2] == "prod_done" and int(x[3]) == off + 1), None)
        ins = [next((t for t, o in fs if o > off and t > t_app), None) for fs in fetches.values()]
        if k_in < 0 or k_fl >= len(rows) or done is None or None in ins or not ins:
            continue
        t_in, t_fl, t_next = int(rows[k_in][0]), int(rows[k_fl][0]), int(rows[k_next][0])
        for name, v in (("produce in -> appended", t_app - t_in), ("appended -> fetch answers flushed", t_fl - t_app),
                        ("flushed -> first follower fetch in", min(ins) - t_fl),
                        ("flushed -> last follower fetch in", max(ins) - t_fl),
                        ("last follower fetch in -> produce answered", done - max(ins)),
                        ("produce answered -> next produce in", t_next - done),
                        ("round (produce in -> next produce in)", t_next - t_in),
                        ("leader CPU produce in -> appended", int(r[1]) - int(rows[k_in][1])),
                        ("leader CPU appended -> flushed", int(rows[k_fl][1]) - int(r[1]))):
            steps[name].append(v / 1e6)
    print(f"leader: trace.{leader}, {len(apps)} appends, {len(steps['round (produce in -> next produce in)'])} "
          "rounds lined up")
    for name, v in steps.items():
        if v:
            print(f"  {name:44s} p50 {q(v, .5):7.3f}  p90 {q(v, .9):7.3f}  p99 {q(v, .99):7.3f}  max {max(v):7.3f} ms")
    rounds = steps["round (produce in -> next produce in)"]
    if rounds:
        total = sum(rounds)
        print("  wall time in rounds longer than " + ", ".join(
            f"{t} ms: {sum(x for x in rounds if x > t) / total:.0%}" for t in (2, 4, 6, 10)))
    for pid, rs in sorted(traces.items()):
        applied = []
        for i, r in enumerate(rs):
            if r[2] == "r_in" and int(r[4]) > 0:
                k = i + 1
                while k < len(rs) and rs[k][2] != "r_done":
                    k += 1
                m = k + 1
                while m < len(rs) and rs[m][2] != "r_req":
                    m += 1
                if m < len(rs):
                    applied.append(((int(rs[k][0]) - int(r[0])) / 1e6, (int(rs[m][0]) - int(r[0])) / 1e6))
        gcs, start = [], None
        t_first = int(apps[0][1][0]) if apps else 0
        for r in rs:
            if r[2] == "gc_start" and int(r[0]) >= t_first:
                start = r
            elif r[2] == "gc_stop" and start is not None:
                gcs.append((int(r[0]) - int(start[0])) / 1e6)
                start = None
        line = (f"trace.{pid}: GC after the first append {len(gcs)} pauses, {sum(gcs):.1f} ms, "
                f"max {max(gcs, default=0):.1f} ms")
        if applied:
            line += (f"; follower answers applied {len(applied)}: apply p50 {q([a for a, _ in applied], .5):.3f} ms, "
                     f"answer in -> next fetch built p50 {q([b for _, b in applied], .5):.3f} "
                     f"p99 {q([b for _, b in applied], .99):.3f} ms")
        print(line)


if __name__ == "__main__":
    main()
