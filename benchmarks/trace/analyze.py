"""Line up the commit-path events written by ``sitecustomize.py`` (see its docstring).

Prints, per step of a commit, the median and p90 time in microseconds (leader:
append -> first Fetch answer written; the first follower to answer: receive ->
fsync -> next Fetch sent; leader: Fetch received -> commit), how often a
follower's Fetch arrived while the leader was in an in-line fsync, and a few
raw per-append timelines (``--show N``).
"""
import argparse
import bisect
import glob
import statistics


def load(path):
    ev = {}
    for line in open(path).read().splitlines():
        t, g = line.split(" ")
        ev.setdefault(g, []).append(int(t))
    return ev


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--glob", default="/tmp/kraft-trace.*")
    ap.add_argument("--show", type=int, default=0, help="print N raw timelines (us from the append)")
    args = ap.parse_args()
    files = sorted(glob.glob(args.glob), key=lambda f: -len(load(f).get("A", [])))
    if len(files) < 2 or not load(files[0]).get("A"):
        raise SystemExit("no trace with appends found (did the run set KTRACE=1?)")
    L, Fs = load(files[0]), [load(f) for f in files[1:]]

    def nxt(arr, t):
        i = bisect.bisect_left(arr, t)
        return arr[i] if i < len(arr) else None

    rows = []
    A = L["A"]
    for a in A[len(A) // 5:-20]:  # skip the warm-up and the tail
        w = nxt(L["W"], a)
        best = None
        for F in Fs:
            r = nxt(F["R"], w)
            f0 = nxt(F["F"], r) if r else None
            f1 = nxt(F["F<"], f0) if f0 else None
            s1 = nxt(F["S<"], f1) if f1 else None
            if s1 is None:
                continue
            c = {"network to follower": r - w, "follower: receive -> fsync": f0 - r,
                 "follower: fsync": f1 - f0, "follower: fsync -> Fetch sent": s1 - f1, "_sent": s1}
            if best is None or s1 < best["_sent"]:
                best = c
        if best is None:
            continue
        s1 = best.pop("_sent")
        d = nxt(L["D"], s1)
        c = nxt(L["C"], d) if d else None
        if c is None:
            continue
        rows.append({"leader: append -> answer written": w - a, **best,
                     "network to leader": d - s1, "leader: Fetch -> commit": c - d, "total": c - a})
    print(f"{len(rows)} appends (first follower to answer), us")
    for k in rows[0]:
        xs = sorted(r[k] for r in rows)
        print(f"  {k:32s} p50 {xs[len(xs) // 2] / 1e3:7.0f}   p90 {xs[len(xs) * 9 // 10] / 1e3:7.0f}")
    sends = sorted(t for F in Fs for t in F.get("S<", []))
    waits = []
    for a, b in zip(L.get("F", []), L.get("F<", [])):
        waits += [b - s for s in sends[bisect.bisect_left(sends, a):bisect.bisect_left(sends, b)]]
    print(f"leader in-line fsyncs: {len(L.get('F', []))}, follower Fetches sent during one: {len(waits)}"
          + (f", median wait {statistics.median(waits) / 1e3:.0f} us" if waits else ""))
    if args.show:
        ev = sorted([(t, "L", g) for g, ts in L.items() for t in ts]
                    + [(t, f"F{i + 1}", g) for i, F in enumerate(Fs) for g, ts in F.items() for t in ts])
        starts = [i for i, e in enumerate(ev) if e[1] == "L" and e[2] == "A"]
        for i in starts[len(starts) // 2:len(starts) // 2 + args.show]:
            t0 = ev[i][0]
            out = []
            for t, who, g in ev[i:]:
                if t - t0 > 3e6:
                    break
                out.append(f"{(t - t0) / 1e3:.0f}{who}:{g}")
            print(" ".join(out))


if __name__ == "__main__":
    main()
