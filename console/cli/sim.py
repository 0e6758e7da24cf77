"""``specctl sim``: the simulator alone, as SGLang's server is started: its flags, its port (30000).

One process serves ``--replicas N`` simulated servers on N consecutive ports
(a fleet on one machine). Run alone it has no background load (``--load
idle``), so an outside benchmark measures only its own requests; the console's
embedded simulator keeps its lively default. Bad flags: one line, exit 2; a
port in use: one line, exit 1 (the flags are fine, the machine refuses them).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

PROG = "specctl sim"
DEFAULT_PORT = 30000  # SGLang's


def add_parser(sub: Any) -> argparse.ArgumentParser:
    from specctl.runtime.sim.cli import add_arguments

    text = "run the SGLang simulator alone (SGLang's flags; port 30000)"
    p: argparse.ArgumentParser = sub.add_parser("sim", help=text, description=text[0].upper() + text[1:] + ".")
    add_arguments(p, port=DEFAULT_PORT, load="idle")
    p.error = _usage  # type: ignore[method-assign]  # one line, exit 2, for argparse's own refusals too
    parse = p.parse_known_args

    def strict(args: Any = None, namespace: Any = None) -> Any:
        """Unknown flags refused here, in one line, rather than by the top-level parser's usage block."""
        ns, extras = parse(args, namespace)
        if extras:
            _usage(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras

    p.parse_known_args = strict  # type: ignore[method-assign]
    return p


def _usage(message: str) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


def run(args: argparse.Namespace) -> int:
    from specctl.runtime.sim.cli import build_config
    from specctl.runtime.sim.cli import run as serve

    return serve(args, build_config(args, _usage), PROG)
