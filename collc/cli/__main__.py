"""``python -m collc.cli``: the `collc` command."""

from collc.cli import main

main()
