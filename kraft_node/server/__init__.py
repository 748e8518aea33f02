"""The node: loads its config, owns the listeners and routes each API key to its handler.

``config.py`` is the node's config (``NodeConfig``, Kafka's ``server.properties``
names; the quorum's own settings are ``kraft_node.raft.config.QuorumConfig``);
``start.py`` is the ``kraft-server-start`` entry point; ``tools/`` holds the
operator CLIs (``kraft-storage``, ``kraft-metadata-quorum``).  Raft RPCs go to
the Raft driver (:mod:`kraft_node.raft.io`); the controller's and the broker's
RPCs will be routed here too, once :mod:`kraft_node.metadata` and
:mod:`kraft_node.broker` hold them.
"""
