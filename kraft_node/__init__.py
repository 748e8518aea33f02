"""kraft_node: KRaft consensus, controller, metadata image and broker, built on kraft_storage."""
