"""``python -m specctl.console.cli``: the same as the ``specctl`` command."""

import sys

from specctl.console.cli.main import main

sys.exit(main())
