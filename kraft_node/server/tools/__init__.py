"""Operator CLIs of a node: ``kraft-storage`` (format, verify, recover) and ``kraft-metadata-quorum``.

They live under the node because they read its config (``NodeConfig``) and
talk to it over its listener, exactly as Kafka's ``kafka-storage.sh`` and
``kafka-metadata-quorum.sh`` do.
"""
