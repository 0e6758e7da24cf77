"""``python -m specctl.runtime.sim``: run the simulator as an HTTP server process (see sim/cli.py)."""

from __future__ import annotations

import sys

from specctl.runtime.sim.cli import admin_guard, config_from_args, main

__all__ = ["admin_guard", "config_from_args", "main"]

if __name__ == "__main__":
    sys.exit(main())
