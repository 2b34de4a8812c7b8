"""Lakeview's own routes under ``/lakeview/v1``: view status, ingest, metrics and the console."""
