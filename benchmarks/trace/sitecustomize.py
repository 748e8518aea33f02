"""Commit-path tracer for raft_tcp_bench (development tool, not part of kraft).

Why: at light load a commit is ~1 ms spread over three processes; a sampling
profiler cannot say which step of which process it was waiting on.  This
records a CLOCK_MONOTONIC timestamp (comparable across processes) at the entry
and exit of the few methods on the commit path, in every process of a run, and
``analyze.py`` lines them up per append.

Use (the bench passes ``KRAFT_BENCH_PYTHONPATH`` on to the voters it starts)::

    rm -f /tmp/kraft-trace.*
    KTRACE=1 KRAFT_BENCH_PYTHONPATH=benchmarks/trace PYTHONPATH=benchmarks/trace:. \\
        python benchmarks/raft_tcp_bench.py --seconds 4 --linger-ms 0 --max-inflight 1 --records-per-append 1
    python benchmarks/trace/analyze.py

Each wrapper costs ~1 us; the figures it gives are for comparing steps, the
bench's own latency figures are taken without it.  Methods are wrapped by name:
rename one and its tag silently disappears from the output.
"""
import os

if os.environ.get("KTRACE"):
    import atexit
    import gc
    import signal
    import time

    _ev = []
    _t = time.perf_counter_ns

    def _dump():
        with open(f"/tmp/kraft-trace.{os.getpid()}", "w") as f:
            f.write("\n".join(f"{t} {g}" for t, g in _ev))

    atexit.register(_dump)

    def _term(*_):
        _dump()
        os._exit(0)

    signal.signal(signal.SIGTERM, _term)

    def _gc(phase, info):
        _ev.append((_t(), f"g{info['generation']}" + ("" if phase == "start" else "<")))

    gc.callbacks.append(_gc)

    def _wrap(owner, name, tag):
        f = getattr(owner, name)

        def w(*a, **k):
            _ev.append((_t(), tag))
            try:
                return f(*a, **k)
            finally:
                _ev.append((_t(), tag + "<"))
        setattr(owner, name, w)

    #: tag -> (module, owner attribute or "", method): the commit path, leader and follower
    POINTS = {
        "A": ("kraft_node.raft.io.driver", "RaftDriver", "append"),
        "P": ("kraft_node.raft.io.driver", "RaftDriver", "_poll"),
        "C": ("kraft_node.raft.io.driver", "_PendingAppends", "handle_commit"),
        "D": ("kraft_node.network.server", "_ServerConnection", "data_received"),
        "W": ("kraft_node.network.server", "_ServerConnection", "answered"),
        "R": ("kraft_node.network.client", "KafkaConnection", "data_received"),
        "S": ("kraft_node.network.client", "KafkaConnection", "send"),
        "F": ("kraft_storage.log.segment", "LogSegment", "flush"),
        "cp": ("kraft_node.raft.client", "RaftCore", "poll"),
        "hq": ("kraft_node.raft.client", "RaftCore", "handle_request"),
        "hr": ("kraft_node.raft.client", "RaftCore", "handle_response"),
        "H": ("kraft_node.raft.client", "RaftCore", "_on_leader_hwm_update"),
        "tcf": ("kraft_node.raft.client", "RaftCore", "_try_complete_fetch"),
        "al": ("kraft_node.raft.io.kafka_log", "KafkaRaftLog", "append_as_leader"),
        "af": ("kraft_node.raft.io.kafka_log", "KafkaRaftLog", "append_as_follower"),
        "qf": ("kraft_node.raft.io.wire", "", "request_from_wire"),
        "qw": ("kraft_node.raft.io.wire", "", "request_to_wire"),
        "rw": ("kraft_node.raft.io.wire", "", "response_from_wire"),
        "sw": ("kraft_node.raft.io.wire", "", "response_to_wire"),
        "fe": ("kraft_node.network.frames", "FrameReader", "feed"),
        "dr": ("kraft_node.network.client", "", "decode_response"),
        "or": ("kraft_node.raft.io.driver", "RaftDriver", "_on_response"),
        "eo": ("kraft_node.raft.io.kafka_log", "KafkaRaftLog", "end_offset_for_epoch"),
        "ur": ("kraft_node.raft.roles", "LeaderState", "update_replica_state"),
        "uq": ("kraft_node.raft.roles", "LeaderState", "_update_check_quorum"),
    }

    def _install():
        import importlib
        for tag, (mod, owner, name) in POINTS.items():
            m = importlib.import_module(mod)
            _wrap(getattr(m, owner) if owner else m, name, tag)

    # Install when the first event loop is made: every kraft module is imported by then.
    try:
        import uvloop
        _new = uvloop.new_event_loop

        def _new_loop(*a, **k):
            if not getattr(_new_loop, "done", False):
                _new_loop.done = True
                _install()
            return _new(*a, **k)
        uvloop.new_event_loop = _new_loop
    except ImportError:
        pass
