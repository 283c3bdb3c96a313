"""collc: a compiler for collective-communication schedules.

Write an algorithm once in a `.coll` file, prove it for the rank counts you
ask, and run it::

    import collc
    inst = collc.load("examples/swing_bw.coll").instantiate(p=16)
    assert inst.verify().ok
"""

from collc.api import Algorithm, Instance, list_examples, load, parse
from collc.diagnostics import CollError

__all__ = ["Algorithm", "CollError", "Instance", "list_examples", "load", "parse"]
__version__ = "0.1.0"
