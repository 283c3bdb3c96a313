"""`collc examples` and `collc codecs`: what ships with collc."""

from __future__ import annotations

import json

import click

from collc import api
from collc.cli.common import (
    main,
)


@main.command()
def examples() -> None:
    """List the bundled example algorithms (usable by name in place of a FILE); those with
    compression points (examples/compression/), then those for tori (examples/torus/), come last."""
    paths = api.list_examples()
    width = max((len(path.stem) for path in paths), default=0)
    for path in paths:
        first = ""
        for line in path.read_text().splitlines():
            if line.startswith("#"):
                first = line.lstrip("# ").strip()
                break
        click.echo(f"{path.stem:<{max(26, width)}} {first}")


@main.command(name="codecs")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def codecs_cmd(as_json: bool) -> None:
    """List the codecs a schedule can compress with, and their properties (docs/codecs.md)."""
    from collc.codecs import describe

    rows = describe()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    yes = {True: "yes", False: "no"}
    header = f"{'codec':<10} {'example':<22} {'lossy':<6} {'error':<11} {'idempotent':<11} {'homomorphic':<12} "
    header += f"{'static size':<12} {'cuda':<5} available"
    click.echo(header)
    for r in rows:
        click.echo(
            f"{r['name']:<10} {r['spec']:<22} {yes[r['lossy']]:<6} {r['error_model']:<11} {yes[r['idempotent']]:<11} "
            f"{yes[r['homomorphic_sum']]:<12} {yes[r['static_size']]:<12} {yes[r['cuda']]:<5} {yes[r['available']]}"
        )
