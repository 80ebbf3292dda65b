"""Every `invoke` task, one module per concern; ``ns``, built here, is what the root tasks.py hands Invoke.

A task body turns its flags into one request, calls the library and prints. Each module's ``DEFAULTS``
(``stack.*`` keys, overridable in invoke.yaml or with INVOKE_STACK_* variables) sits beside its tasks.
"""

from __future__ import annotations

import sys

from invoke import Collection, Task

from sglang_stack import ROOT
from sglang_stack.tasks import bench, image, patching, release, services, smoke
from sglang_stack.tasks.boundary import (
    check_project_config, help_after_task, optional_positionals, shape_parse_errors, signals_interrupt,
)

MODULES = (image, patching, services, smoke, bench, release)

ns = Collection()
for _module in MODULES:
    for _name, _obj in sorted(vars(_module).items()):
        if isinstance(_obj, Task) and _obj.__module__ == _module.__name__:
            # One convention for every task: long flags only. Invoke's automatic short flags gave `-e` three
            # meanings (--engine, --endpoint, --keyless) and `settings -h` took --host from --help.
            _obj.auto_shortflags = False
            ns.add_task(_obj)
    ns.configure(getattr(_module, "DEFAULTS", {}))


def setup_cli() -> None:
    """What the `invoke` command needs before it parses: quiet Ctrl-C, optional positionals, ``TASK --help``,
    one-line parse errors, and a check of invoke.yaml's keys."""
    program = sys.modules["invoke.main"].program
    signals_interrupt()  # Ctrl-C: tasks.py installed quiet_interrupts before these modules imported
    help_after_task(program)  # innermost: it reads the line as the user typed it
    # Before shape_parse_errors wraps it again: `invoke doctor eagle3`, like `invoke up eagle3`.
    optional_positionals(program, {"doctor": "service", "status": "service", "acceptance": "service",
                                   "model-revision": "role", "models-verify": "role", "verify": "image"})
    shape_parse_errors(program)
    check_project_config(ROOT)
