"""Core: incremental view maintenance over Z-sets (per-epoch arithmetic), the recompute oracle, explain."""
