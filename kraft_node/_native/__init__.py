"""Cython builds of kraft_node kernels (the generated RPC codecs on the Raft hot path);
twins in kraft_node._pure, chosen once per process by kraft_storage.accel."""
