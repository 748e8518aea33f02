"""acks=all round tracer for the broker processes (development tool, not part of kraft).

Why: an acks=all round (Produce in, leader append, parked follower fetches answered, follower
appends, their next fetches, high watermark, Produce answered) crosses three broker processes in
1-10 ms on this machine; a sampling profiler cannot say which step of which process a round was
waiting on.  This records ``CLOCK_MONOTONIC`` (comparable across processes) and the thread's
CPU time at a few points of that path, in every broker process of a run, and ``analyze.py``
lines them up per append.

Switch it on for processes started with this directory on ``PYTHONPATH`` and
``KRAFT_ACKS_TRACE_DIR`` set (the test clusters pass the environment on)::

    mkdir /tmp/t && KRAFT_ACKS_TRACE_DIR=/tmp/t PYTHONPATH=benchmarks/trace_acks_all \
        python benchmarks/broker_partitions_bench.py --runs 0 --latency-inflight 1 --failovers 0 --out /tmp/t/r.md
    python benchmarks/trace_acks_all/analyze.py /tmp/t --topic latency-1

Events (one line each: ``monotonic_ns thread_cpu_ns event fields...``), written to
``$KRAFT_ACKS_TRACE_DIR/trace.<pid>``:

* leader: ``recv <bytes>`` (a server connection's data_received), ``append <topic> <last offset>
  <ns>``, ``f_in <replica> <correlation id> <fetch offset>`` (a follower's Fetch arrives),
  ``f_resp <correlation id> <record bytes>`` (a Fetch answered), ``flush <connections>`` (the
  server writes its answers), ``prod_done <required offset>`` (the acks=all purgatory answers);
* follower: ``r_in <leader> <record bytes>`` / ``r_done <leader>`` (a fetch answer applied),
  ``r_req <leader> <highest fetch offset>`` (the next Fetch built);
* every process: ``gc_start <generation>`` / ``gc_stop <generation>``.

The methods are wrapped from outside when ``kraft_node.server.broker`` is first imported; nothing
in kraft knows about this file.  Lines are buffered and written by a daemon thread every 0.5 s (a
``kill -9`` loses at most that).
"""
import os
import sys
import threading
import time

_DIR = os.environ.get("KRAFT_ACKS_TRACE_DIR")


def _install() -> None:
    import importlib.abc

    buf: list = []
    lock = threading.Lock()
    out = [None]

    def ev(*fields) -> None:
        buf.append((time.monotonic_ns(), time.thread_time_ns()) + fields)

    def flush() -> None:
        with lock:
            if not buf:
                return
            rows, buf[:] = list(buf), []
            if out[0] is None:
                out[0] = open(os.path.join(_DIR, f"trace.{os.getpid()}"), "a")
            out[0].write("".join(" ".join(map(str, r)) + "\n" for r in rows))
            out[0].flush()

    def flusher() -> None:
        while True:
            time.sleep(0.5)
            try:
                flush()
            except Exception:  # noqa: BLE001 - a tracing tool must never stop the broker
                pass

    def patch() -> None:
        import gc

        import kraft_node.broker.partition as pt
        import kraft_node.broker.partition_apis as pa
        import kraft_node.broker.replica_fetcher as rf
        import kraft_node.broker.replica_manager as rm
        import kraft_node.network.server as srv

        threading.Thread(target=flusher, daemon=True, name="acks-trace").start()
        main = threading.main_thread()
        gc.callbacks.append(lambda phase, info: ev("gc_" + phase, info["generation"])
                            if threading.current_thread() is main else None)

        append = pt.Partition.append_records_to_leader

        def traced_append(self, *a, **k):
            t = time.monotonic_ns()
            res = append(self, *a, **k)
            ev("append", self.topic_partition.topic, res.last_offset, time.monotonic_ns() - t)
            return res
        pt.Partition.append_records_to_leader = traced_append

        wait = rm.ReplicaManager.wait_for_high_watermarks

        def traced_wait(self, required, timeout_ms, callback):
            need = max(v[0] for v in required.values())

            def done(errors):
                ev("prod_done", need)
                callback(errors)
            return wait(self, required, timeout_ms, done)
        rm.ReplicaManager.wait_for_high_watermarks = traced_wait

        handle_fetch = pa.PartitionApis.handle_fetch

        def traced_fetch(self, ctx, body):
            rid = int(body.replica_state.replica_id) if ctx.api_version >= 15 else int(body.replica_id)
            if rid >= 0 and body.topics and body.topics[0].partitions:
                ev("f_in", rid, ctx.header.correlation_id, body.topics[0].partitions[0].fetch_offset)
            return handle_fetch(self, ctx, body)
        pa.PartitionApis.handle_fetch = traced_fetch

        respond = srv.RequestContext.respond

        def traced_respond(self, response):
            if self.header is not None and self.header.request_api_key == 1:
                ev("f_resp", self.header.correlation_id,
                   sum(len(p.records) for t in response.responses for p in t.partitions))
            return respond(self, response)
        srv.RequestContext.respond = traced_respond

        server_flush = srv.KafkaServer._flush

        def traced_flush(self):
            ev("flush", len(self._unflushed))
            return server_flush(self)
        srv.KafkaServer._flush = traced_flush

        received = srv._ServerConnection.data_received

        def traced_received(self, data):
            ev("recv", len(data))
            return received(self, data)
        srv._ServerConnection.data_received = traced_received

        process = rf.ReplicaFetcher._process_fetch_response

        def traced_process(self, response, version, asked, request):
            ev("r_in", self.source.id, sum(len(p.records or b"") for t in response.responses for p in t.partitions))
            process(self, response, version, asked, request)
            ev("r_done", self.source.id)
        rf.ReplicaFetcher._process_fetch_response = traced_process

        build = rf.ReplicaFetcher._build_fetch

        def traced_build(self, version, now):
            res = build(self, version, now)
            if res is not None:
                ev("r_req", self.source.id, max(p.fetch_offset for t in res[0].topics for p in t.partitions))
            return res
        rf.ReplicaFetcher._build_fetch = traced_build

    class _Hook(importlib.abc.MetaPathFinder):
        done = False

        def find_spec(self, name, path, target=None):
            if name == "kraft_node.server.broker" and not _Hook.done:
                _Hook.done = True
                try:
                    patch()
                except Exception as exc:  # noqa: BLE001 - say so, never stop the broker
                    sys.stderr.write(f"acks=all tracer not installed: {exc!r}\n")
            return None

    sys.meta_path.insert(0, _Hook())


if _DIR:
    _install()
