"""How often the plugin's per-step counters speak in the server log.

Why one place: the off state's counters (fast_off's off steps, the early
publish, the skipped draft prefills) each log their first event, so an operator
sees at once that the path took hold, and then one line every ``LOG_EVERY``
events, so a day of serving at 256 requests (tens of millions of steps) adds a
few thousand lines, not millions. The three counters keep the same cadence.
"""

from __future__ import annotations

LOG_EVERY = 20000  # events between two progress lines of one counter


def due(count: int) -> bool:
    """Whether the ``count``-th event of a counter gets a line: the first, then every LOG_EVERY."""
    return count == 1 or (count > 0 and count % LOG_EVERY == 0)
