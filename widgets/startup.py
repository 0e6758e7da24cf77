"""Server start-up as a progress bar: which phase, how far, how long so far.

Shown only while a sample says the server is ``starting`` with a
``progress`` object; the elapsed time is the record's own ``elapsed_s``.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Label, ProgressBar

from specctl.runtime.core.records import Progress

PHASES = {"weights": "loading weights", "kv_cache": "allocating KV cache",
          "cuda_graphs": "capturing CUDA graphs", "warmup": "warming every speculation state", "ready": "ready"}


class StartupProgress(Widget):
    """Set ``progress`` to a sample's ``server.progress`` dict, or None to hide."""

    DEFAULT_CSS = """
    StartupProgress {
        height: 1;
        layout: horizontal;
        display: none;
        padding: 0 1;
        &.-shown { display: block; }
        Label { width: auto; color: $warning; text-style: bold; }
        ProgressBar { width: 1fr; padding: 0 0 0 2; }
        #startup-elapsed { color: $foreground-muted; text-style: none; }
    }
    """

    progress: reactive[Progress | None] = reactive(None)

    def compose(self) -> ComposeResult:
        yield Label("starting", id="startup-phase")
        yield ProgressBar(total=100, show_eta=False)
        yield Label("", id="startup-elapsed")

    def watch_progress(self, progress: Progress | None) -> None:
        self.set_class(progress is not None, "-shown")
        if progress is None or not self.is_mounted:
            return
        phase = PHASES.get(str(progress.get("phase")), str(progress.get("phase")))
        self.query_one("#startup-phase", Label).update(f"Starting server: {phase}")
        fraction, elapsed = progress.get("fraction"), progress.get("elapsed_s")
        bar = self.query_one(ProgressBar)
        bar.update(total=None if fraction is None else 100, progress=100 * (fraction or 0.0))
        self.query_one("#startup-elapsed", Label).update("" if elapsed is None else f"  {elapsed:.1f} s")
