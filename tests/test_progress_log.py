"""The plugin's counters speak on their first event and then every LOG_EVERY, never in between."""

from specctl.runtime.sglang_plugin import progress_log


def test_a_counter_speaks_on_its_first_event_then_once_every_log_every() -> None:
    every = progress_log.LOG_EVERY
    spoke = [n for n in range(0, 3 * every + 2) if progress_log.due(n)]
    assert spoke == [1, every, 2 * every, 3 * every]
