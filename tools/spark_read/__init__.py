"""Spark reads Ferry topics straight from S3: the ``ferry`` data source (``spark.read.format("ferry")``).

``offsets`` (pure: Spark's startingOffsets/endingOffsets and the input partitions),
``object_tasks`` (pure: ``readBy=object``'s input partitions of whole objects), ``records``
(pure: stored batches to Arrow columns), ``source`` (the DataSource shell: metadata from the
controllers on the driver, S3 GETs on the executors), ``key_counts`` (the example job).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORMAT_NAME = "ferry"


def register(spark: "SparkSession") -> None:
    """Make ``spark.read.format("ferry")`` available in this session."""
    from tools.spark_read.source import FerryDataSource

    spark.dataSource.register(FerryDataSource)
