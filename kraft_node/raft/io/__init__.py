"""The Raft I/O layer: what turns the pure core (:mod:`kraft_node.raft`) into a running quorum member.

``driver.py`` runs a ``RaftCore`` on an asyncio event loop (timers, outbound RPCs,
the flush policy); ``kafka_log.py`` is the ``RaftLog`` over Kafka's segmented log
and ``.checkpoint`` snapshots, with the batch and control-record codecs;
``file_state.py`` is Kafka's ``quorum-state`` file; ``wire.py`` translates the
core's messages to and from the generated Kafka RPC codecs.

The dependency points one way: this layer imports the core, the core never
imports this layer (it stays free of sockets, files, clocks and threads so the
simulator in ``raft/sim/`` can run it deterministically).  The node
(:mod:`kraft_node.server`) owns the listener and routes Raft RPCs here.
"""
