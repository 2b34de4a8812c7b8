"""Core: the typed project configuration (pydantic models, unknown keys rejected), cadence, schema."""
