"""Lets Spark find the ``kraft`` data source without ``register(spark)``.

Spark 4 looks up Python data sources once per session, on first use of a
format it does not know: its Python worker imports every top-level module
whose name starts with ``pyspark_`` and registers the ``DefaultSource`` each
one exports (``pyspark.sql.worker.lookup_data_sources``).  Installing kraft
installs this module, so ``spark.read.format("kraft")`` works as it is.
``kraft_storage.spark.register(spark, pushdown=True)`` is still how to turn
on filter pushdown.
"""
from kraft_storage.spark.datasource import KraftDataSource as DefaultSource

__all__ = ["DefaultSource"]
