"""Iceberg tables: the writer (merge-on-read with position deletes, or copy-on-write), view groups committed in one transaction, live-file and key lookups, maintenance."""
