"""The console's pure parts: folding records into a timeline, charts and banner from it.

Records can come from any journal file, so the fold is also fed arbitrary
JSON by hypothesis: whatever a journal holds, the console draws what it can
and never raises.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specctl.console.tui.links import RESET
from specctl.console.tui.model.charts import build_charts, off_spans
from specctl.console.tui.model.timeline import Point, Timeline
from specctl.console.tui.screens.dashboard import banner_state
from specctl.runtime.core import records

T = 1764400000.0


def sample(t: float, on: bool | None, running: int = 10) -> dict:
    spec = None if on is None else {"mode": "auto", "on": on, "steps": 3 if on else 0, "reason": "load",
                                    "settings": {"steps": 3, "off_at": 64, "on_at": 32}}
    return records.sample({"state": "ready", "running": running, "queued": 0, "gen_tps": 100.0,
                           "accept_len": 2.5 if on else None}, spec, [], [], sim=True, t=t)


def test_off_spans_run_from_the_first_off_sample_to_the_next_on_one() -> None:
    points = [Point(T + i, None, None, None, None, on) for i, on in
              enumerate([True, False, False, True, None, False])]
    assert off_spans(points) == ((T + 1, T + 3), (T + 5, T + 5))


def test_the_banner_takes_the_last_switch_from_its_event_and_ago_from_record_time() -> None:
    timeline = Timeline()
    timeline.fold(sample(T, True))
    timeline.fold(records.event("spec_switch", t=T + 1, on=False, reason="load", batch_size=70, step=9))
    timeline.fold(sample(T + 31, False))
    state = banner_state(timeline, "replay", "")
    assert (state.spec_on, state.reason, state.switch_batch, state.now - state.switch_t) == (False, "load", 70, 30)


def test_a_reset_forgets_everything_shown() -> None:
    timeline = Timeline()
    timeline.fold(sample(T, True))
    timeline.fold(records.event("server_start", t=T, pid=1, url="u"))
    timeline.fold({"v": 1, "t": T, "kind": RESET})
    assert timeline.latest is None and not timeline.points and timeline.take_log() == (True, [])


def test_charts_cover_the_window_and_draw_the_thresholds() -> None:
    timeline = Timeline()
    for i in range(700):
        timeline.fold(sample(T + i, i < 650, running=i % 100))
    tps, accept, requests = build_charts(timeline, 300.0)
    assert tps.series[0][0][0] == T + 399 and tps.series[0][-1][0] == T + 699
    assert requests.thresholds == ((64.0, "off_at"), (32.0, "on_at"))
    assert accept.off_spans == ((T + 650, T + 699),)


def test_a_stopped_server_shows_no_current_figures_though_its_history_stays() -> None:
    timeline = Timeline()
    for i in range(5):
        timeline.fold(sample(T + i, True, running=7))
    assert [chart.legend.split()[0] for chart in build_charts(timeline, 300.0)] == ["100", "2.50", "run"]
    timeline.fold(records.sample({"state": "stopped"}, None, [], [], sim=True, t=T + 5))
    tps, accept, requests = build_charts(timeline, 300.0)
    assert (tps.legend, accept.legend) == ("–", "–") and requests.legend == "run – · queue –"
    assert len(tps.series[0]) == 5, "the history is still drawn"


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4),
                           max_leaves=10)
junk_records = st.fixed_dictionaries(
    {"t": st.floats(T, T + 1000), "kind": st.sampled_from(["sample", "event", "command", RESET, "other"])},
    optional={"server": json_values, "spec": json_values, "gpus": json_values, "event": json_values,
              "sim": json_values})


@settings(max_examples=300, deadline=None)
@given(st.lists(junk_records, max_size=20))
def test_any_journal_content_folds_and_draws_without_raising(recs: list[dict]) -> None:
    """Through the one check the links apply to what they read (records.parse), as a replay does."""
    timeline = Timeline()
    for raw in recs:
        record = raw if raw["kind"] == RESET else records.parse(raw)
        if record is not None:
            timeline.fold(record)
    build_charts(timeline, 300.0)
    banner_state(timeline, "replay", "")
    timeline.take_log()


def test_gpu_panels_are_bordered_only_where_they_all_fit_in_half_the_height() -> None:
    from specctl.console.tui.screens.dashboard import gpu_layout

    assert gpu_layout(160, 48, 8) == (False, 4)  # 2 rows of 4 panels
    assert gpu_layout(120, 40, 8) == (True, 1)  # 3 rows would take more than half
    assert gpu_layout(120, 40, 2) == (False, 2)
    assert gpu_layout(80, 24, 1) == (True, 1)  # narrow: one line per GPU
    assert gpu_layout(160, 48, 16) == (True, 1)  # 4 rows of panels do not fit; lines scroll


def test_a_settings_event_shows_what_changed_not_the_whole_set_again() -> None:
    from specctl.widgets.event_log import describe

    full = {"mode": "auto", "steps": 3, "off_at": 48, "on_at": 16}
    changed = records.event("settings", t=T, changes={"off_at": 48, "on_at": 16}, settings=full)
    assert describe(changed) == ("SETTINGS", "settings off_at=48 on_at=16", "plain")
    restored = records.event("settings", t=T, settings=full)  # no changes said: the set is what there is
    assert describe(restored)[1] == "settings mode=auto steps=3 off_at=48 on_at=16"


def test_calibration_says_what_it_learned_from_how_much_and_each_probe() -> None:
    from specctl.widgets.event_log import describe

    table = [{"bucket": 4, "verdict": "on", "gain": 1.2}] * 3  # the journal keeps it; the log line does not
    learned = records.event("calibrated", t=T, changes={"off_at": 48, "on_at": 24, "min_accept": 0.81}, ok=True,
                            table=table, readings={"4": 900, "64": 1004})
    assert describe(learned) == ("CALIB", "learned off_at=48 on_at=24 min_accept=0.81 from 1,904 steps in 2 "
                                          "buckets", "plain")
    refused = records.event("calibrated", t=T, changes={"off_at": 48}, ok=False, readings={"4": 10})
    assert describe(refused)[1].endswith("(the server refused it)")
    probe = records.event("calibration_probe", t=T, state="off", bucket=64, phase="begin", ok=True)
    assert describe(probe) == ("CALIB", "probing off at batch bucket 64", "plain")


def test_a_journal_that_ends_with_its_supervisor_stopping_does_not_end_on_ready() -> None:
    timeline = Timeline()
    timeline.fold(sample(T, True))
    assert banner_state(timeline, "replay", "").server_state == "ready"
    timeline.fold(records.event("supervisor_stop", t=T + 1))
    state = banner_state(timeline, "replay", "")
    assert (state.server_state, state.server_error) == ("unwatched", "(the supervisor stopped)")
    timeline.fold(records.event("supervisor_start", t=T + 9, backend="sim", sim=True))
    timeline.fold(sample(T + 10, True))
    assert banner_state(timeline, "replay", "").server_state == "ready"


def test_failed_gpus_are_named_in_the_banner_where_their_panels_may_be_scrolled_away() -> None:
    timeline = Timeline()
    record = sample(T, True)
    record["gpus"] = [{"index": i, "state": "failed" if i in (3, 12) else "ok"} for i in range(16)]
    timeline.fold(record)
    assert banner_state(timeline, "replay", "").failed_gpus == (3, 12)


def test_accept_length_reads_a_dash_while_speculation_is_off_even_if_the_server_still_reports_one() -> None:
    timeline = Timeline()
    timeline.fold(sample(T, True))
    off = sample(T + 1, False)
    off["server"]["accept_len"] = 2.4  # SGLang's gauge keeps its last value after speculation stops
    timeline.fold(off)
    _, accept, _ = build_charts(timeline, 300.0)
    assert accept.legend == "–"
    timeline.fold(sample(T + 2, True))
    assert build_charts(timeline, 300.0)[1].legend == "2.50"


def test_a_lost_link_leaves_no_figure_looking_live() -> None:
    timeline = Timeline()
    timeline.fold(sample(T, True))
    legends = [c.legend for c in build_charts(timeline, 300.0, lost=True)]
    assert legends == ["–", "–", "run – · queue –"]


def test_an_unreachable_server_s_last_figures_are_marked_old() -> None:
    timeline = Timeline()
    timeline.fold(sample(T, True))
    gone = records.sample({"state": "unreachable"}, None, [], [], sim=True, t=T + 1)
    timeline.fold(gone)
    tps, accept, _ = build_charts(timeline, 300.0)
    assert tps.legend == "– (was 100)" and accept.legend == "– (was 2.50)"
    assert banner_state(timeline, "x", "").last_seen_on is True
    timeline.fold(sample(T + 2, True))
    assert build_charts(timeline, 300.0)[0].legend == "100" and timeline.unreachable_since is None
