"""Core: SQL analysis (sqlglot) and each view's incremental plan; the view DAG; DuckDB over Arrow."""
