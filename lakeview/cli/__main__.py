"""`python -m lakeview.cli`: the same command line as the `lakeview` script."""

from lakeview.cli.main import main

main()
