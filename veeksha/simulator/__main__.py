"""``python -m veeksha.simulator``: the same as ``veeksha sim-server``."""

from __future__ import annotations

import gc
import sys

from veeksha.cli import set_library_defaults

set_library_defaults()  # (before the config's models are built: see LIBRARY_DEFAULTS)

from veeksha.errors import VeekshaError  # noqa: E402
from veeksha.simulator.cli import sim_server  # noqa: E402


def main(args: list[str] | None = None) -> None:
    """Run the command (``args``, else the command line's); a VeekshaError becomes a message
    and its exit code."""
    gc.disable()  # until the server is set up (see runner._serve): no pass over start-up objects
    try:
        sim_server.main(args, prog_name="veeksha sim-server")
    except VeekshaError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
