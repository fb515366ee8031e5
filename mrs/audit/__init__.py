"""Spark audit of the journals: the `mrs-pcj`/`mrs-dlj` data source, report and export.

`from mrs.audit import register; register(spark)` registers both formats with a
SparkSession. The Parquet writer (`mrs.audit.parquet`) needs pyarrow only.

Layer: command side (above `server`); may import `offline`, `config` and the
vocabulary, `clients` and `journals`; nothing the server runs imports it.
"""

from __future__ import annotations


def register(spark) -> None:
    """Register the `mrs-pcj` and `mrs-dlj` formats with this SparkSession."""
    from mrs.audit.source import register as register_sources

    register_sources(spark)


__all__ = ["register"]
