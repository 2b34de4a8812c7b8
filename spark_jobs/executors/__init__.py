"""Work done by Spark's executors, never collected to the driver: reads of large tables, writes of large batches, a view's first batch (backfill)."""
