"""Delta tables through delta-rs: the writer (merge by key, app transactions for idempotent epochs) and maintenance (optimize, vacuum)."""
