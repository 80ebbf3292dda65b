"""Tasks for sglang-stack. Run `invoke --list`, or `invoke --help TASK`.

Each task is a thin wrapper: the logic lives in the ``sglang_stack`` package.
Defaults live in ``ns.configure`` below; override them in ``invoke.yaml`` or
with ``INVOKE_STACK_*`` environment variables.
"""

from __future__ import annotations

import functools
import sys

from invoke import Collection, Exit, task

from sglang_stack.errors import UserError


def user_errors(body):
    """Turn a ``UserError`` into one line on stderr and exit code 2 (no traceback)."""

    @functools.wraps(body)
    def wrapper(*args, **kwargs):
        try:
            return body(*args, **kwargs)
        except UserError as err:
            raise Exit(f"error: {err}", code=err.code) from None

    return wrapper


# --- lock, render, build -----------------------------------------------------

# --- patches and audit --------------------------------------------------------

# --- services: up, down, logs, status, doctor ---------------------------------

# --- smoke --------------------------------------------------------------------

# --- bench --------------------------------------------------------------------


ns = Collection.from_module(sys.modules[__name__])
ns.configure(
    {
        "stack": {
            "engine": "docker",
        }
    }
)
