"""Tasks for sglang-stack. Run `invoke --list`, or `invoke TASK --help`.

The tasks live in ``sglang_stack/tasks/``, one module per concern; this file only hands Invoke their namespace.
"""

import sys

if "invoke.main" in sys.modules:  # Ctrl-C while the task modules import is one line too, not a traceback
    from sglang_stack.errors import quiet_interrupts

    quiet_interrupts()

from sglang_stack.tasks import ns, setup_cli

if "invoke.main" in sys.modules:  # run by the `invoke` command (or python -m invoke), not imported by a test
    setup_cli()

__all__ = ["ns"]
