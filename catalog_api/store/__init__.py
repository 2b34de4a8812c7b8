"""The catalog store: namespaces, tables and views of one warehouse as pointer rows in SQLite or
PostgreSQL (pyiceberg's SqlCatalog schema) with atomic (multi-)pointer swaps, and the rules on
what a table may point at (inert properties, per-namespace file confinement, format v3)."""
