"""``python -m veeksha.simulator``: the same as ``veeksha sim-server``."""

from __future__ import annotations

import gc
import sys

from veeksha.cli import set_library_defaults
from veeksha.errors import VeekshaError
from veeksha.simulator.cli import sim_server


def main() -> None:
    """Run the command; a VeekshaError becomes a message and its exit code."""
    set_library_defaults()
    gc.disable()  # until the server is set up (see runner._serve): no pass over start-up objects
    try:
        sim_server.main(prog_name="veeksha sim-server")
    except VeekshaError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
