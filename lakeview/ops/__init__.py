"""Core: operational state without Spark or a table format: freshness arithmetic, the runtime
heartbeat, Spark's source logs, progress display, the ingest endpoint's landing."""
