"""Reading Kafka log segments and checkpoints with Spark (and without it).

* :mod:`.files` -- finding Kafka files under a path, cutting them into splits.
* :mod:`.reader` -- one split into Arrow record batches (needs pyarrow only);
  also the single-process reader ``read_arrow`` / ``read_table``.
* :mod:`.datasource` -- the PySpark data source ``kraft`` (needs pyspark 4.1+).

pyspark is imported only when ``KraftDataSource`` or ``register`` is used,
so ``kraft_storage`` never requires it.
"""
from __future__ import annotations

__all__ = ["KraftDataSource", "register", "read_arrow", "read_table", "ReadOptions"]


def __getattr__(name):
    if name in ("KraftDataSource", "register"):
        from kraft_storage.spark import datasource
        return getattr(datasource, name)
    if name in ("read_arrow", "read_table", "ReadOptions"):
        from kraft_storage.spark import reader
        return getattr(reader, name)
    raise AttributeError(f"module 'kraft_storage.spark' has no attribute {name!r}")
