"""kraft_storage: Kafka's on-disk formats, byte for byte.

This layer knows bytes, files and record batches.  It has no networking and
no Raft: ``kraft_node`` builds those on top of it.

Native kernels live in ``kraft_storage._native`` (Cython over ``csrc/``);
each has a pure-Python twin in ``kraft_storage._pure``.  Which one is used is
decided once, at import time, by :mod:`kraft_storage.accel`.
"""
from kraft_storage.accel import NATIVE

__all__ = ["NATIVE"]
__version__ = "0.1.0"
