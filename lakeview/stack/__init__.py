"""Top: the wiring that starts the catalog, the views' Spark queries, maintenance and publishing together."""
