"""Top: the `lakeview` command line (typer), `init`, the demo and the discovery commands."""
