"""mutmut 3's command line, with the functions whose one decorator is ``@validated`` mutated too.

mutmut skips every decorated function but ``@staticmethod`` and ``@classmethod`` ones: a decorator
runs when the function is defined, and the trampoline copies the function with its decorators. That
left the project's public functions out of every run once they were wrapped in argument checks
(``stochformer.core.validation.validated``: no side effect at definition, only checks before the
call). Here a function (or method) whose one decorator is ``@validated`` is mutated like an
undecorated one; its trampoline and each of its mutants keep the decorator, so every call is still
checked as before. Functions with other decorators stay skipped, as mutmut has them.

Run by ``tools/mutation.py`` in place of the ``mutmut`` command (same arguments).
"""

from __future__ import annotations

import multiprocessing
import sys

import libcst as cst
from mutmut.mutation import file_mutation

DECORATOR = "validated"


def validated_only(node: cst.CSTNode) -> bool:
    """Whether ``node`` is a function definition whose one decorator is the bare name ``validated``."""
    return (isinstance(node, cst.FunctionDef) and len(node.decorators) == 1
            and isinstance(node.decorators[0].decorator, cst.Name) and node.decorators[0].decorator.value == DECORATOR)


_skip = file_mutation.MutationVisitor._skip_node_and_children


def _skip_unless_validated(self: file_mutation.MutationVisitor, node: cst.CSTNode) -> bool:
    # every other rule of mutmut's still applies to the function (seen without its decorator)
    return _skip(self, node.with_changes(decorators=[]) if validated_only(node) else node)


def main() -> None:
    # mutmut makes the mutants in a process pool: the patch reaches the workers only through fork
    if multiprocessing.get_start_method() != "fork":
        sys.exit(f"tools/mutmut_run.py needs the 'fork' start method (got {multiprocessing.get_start_method()!r})")
    file_mutation.MutationVisitor._skip_node_and_children = _skip_unless_validated  # type: ignore[method-assign]
    from mutmut.__main__ import cli  # reads the run's setup.cfg on import

    cli()


if __name__ == "__main__":
    main()
