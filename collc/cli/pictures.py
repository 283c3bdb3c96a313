"""`collc viz`: pictures of a schedule (docs/viz.md)."""
