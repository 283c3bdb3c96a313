"""Elaboration: a `Program` plus parameter values becomes a concrete `Schedule`.

Expressions and statements are compiled once per instance into Python
functions (fast to run p times), then every rank's program is run to collect
its operations, step by step.  The functions are generated source (`_Code`):
a statement block, a function body or an expression becomes straight-line
Python with the fast path of every operator inline and the general one
(`collc.values`) behind it, so that running a rank's program makes few calls.

Execution model of the language:

* a ``step:`` block, every iteration of ``for step x in ...`` and every
  communication statement outside a step is one step; the step counter is per
  rank and every rank's program is expected to count the same steps;
* functions are pure: they see their arguments, the parameters and the global
  constants, never ``rank``, so their results are memoised per instance;
* ``do proc(...)`` runs a procedure's statements in place (inside the current
  step when there is one).

The stage, module by module:

* `driver`: parameter binding, the global constants, and the elaboration of
  every rank's phases into the `Schedule` (`elaborate`, `constants`);
* `compiler`: `_Compiler`, which turns AST nodes into Python functions for one
  instance (constant folding, comprehensions, functions and procedures);
* `stmt_code`: the generated source of statements (`_Code`): control flow,
  steps, and communication and codec ops appended to the open step inline;
* `expr_code`: the generated source of expressions (`_ExprCode`), its fast
  paths, and the building (and caching) of generated functions;
* `emitter`: `_Emitter`, which collects every rank's ops into steps and
  phases, and the limits of one elaboration;
* `sampling`: `StepSampler`, which runs only some iterations of long step
  loops, for the simulator (`elaborate_sampled`);
* `scope`: environments and scopes, and the helpers generated code calls;
* `syntax`: checks and walks over the AST that need no instance;
* `codec_ops`: codec tables, codec overrides and compress/decompress ops.
"""

from collc.elaborate.driver import bind_params, constants, elaborate, elaborate_sampled, level_splits
from collc.elaborate.emitter import MAX_CALL_DEPTH as MAX_CALL_DEPTH
from collc.elaborate.emitter import MAX_CHUNKS, MAX_RANKS, MAX_SLOTS, Carry
from collc.elaborate.emitter import MAX_LOOP_ITERATIONS as MAX_LOOP_ITERATIONS
from collc.elaborate.emitter import MAX_STEPS as MAX_STEPS
from collc.ir import ChunkSet

__all__ = [
    "MAX_CHUNKS",
    "MAX_RANKS",
    "MAX_SLOTS",
    "Carry",
    "ChunkSet",
    "bind_params",
    "constants",
    "elaborate",
    "elaborate_sampled",
    "level_splits",
]
