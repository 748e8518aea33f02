"""The node: loads its config, owns the listeners and routes each API key to its handler.

``config.py`` is the node's config (``NodeConfig``, Kafka's ``server.properties``
names; the quorum's own settings are ``kraft_node.raft.config.QuorumConfig``);
``node.py`` is ``KraftNode`` (directory locks, meta.properties, the listener and the
routing table ``api_key -> handler``); ``start.py`` is the ``kraft-server-start``
entry point; ``tools/`` holds the operator CLIs (``kraft-storage``,
``kraft-metadata-quorum``).  Raft RPCs are routed to the Raft driver
(:mod:`kraft_node.raft.io`), which registers them; the controller's and the
broker's RPCs will be registered the same way, once :mod:`kraft_node.metadata` and
:mod:`kraft_node.broker` hold them.
"""
