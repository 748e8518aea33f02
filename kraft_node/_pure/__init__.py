"""Pure-Python twins of kraft_node._native (see kraft_storage.accel)."""
