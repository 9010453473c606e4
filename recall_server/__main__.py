"""python -m recall_server -> the CLI."""

from recall_server.cli import main

main()
