"""The command line of a helper process run in an isolated interpreter, with this veeksha.

The managed server's supervisor and the (unforked) server watch run as ``python -I``: the
supervisor inherits the server's environment and working folder, whose ``PYTHONPATH`` or files
must not change what it imports. But ``-I`` also drops the ``PYTHONPATH`` and the current
folder through which *this* process may have found veeksha (a source checkout run as
``PYTHONPATH=src python -m veeksha.cli``, a second checkout beside an installed one): the child
would then import another veeksha, or none. So the child is started with a two-line bootstrap
that puts the folder this process imported veeksha from first on its path, unless its isolated
path already holds it (a regular install: nothing changes), then runs the module as ``-m``
would.
"""

from __future__ import annotations

import sys
from pathlib import Path

import veeksha

__all__ = ["isolated_module_command", "veeksha_root"]

_BOOTSTRAP = (
    "import runpy, sys\n"
    "if {root!r} not in sys.path: sys.path.insert(0, {root!r})\n"
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n"
)


def veeksha_root() -> str:
    """The folder holding the ``veeksha`` package this process imported."""
    return str(Path(veeksha.__file__).resolve().parent.parent)


def isolated_module_command(module: str, *args: str, root: str | None = None) -> list[str]:
    """``python -I -m module args...`` that imports modules from ``root`` (default: this
    process' veeksha, :func:`veeksha_root`) first when the isolated path lacks it."""
    code = _BOOTSTRAP.format(root=root if root is not None else veeksha_root())
    return [sys.executable, "-I", "-c", code, module, *args]
