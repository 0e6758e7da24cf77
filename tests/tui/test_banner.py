"""The banner's words for states a sample can be in, rendered by the real widget in a real app."""

from __future__ import annotations

from specctl.widgets.banner import BannerState

from support.tui import banner_lines, first_line


async def test_a_forced_mode_the_server_has_not_switched_to_yet_says_switching() -> None:
    assert "SPEC ON  FORCED OFF (switching)" in await first_line(BannerState(spec_on=True, mode="off"))
    assert "SPEC OFF  FORCED ON (switching)" in await first_line(BannerState(spec_on=False, mode="on"))
    for settled in (BannerState(spec_on=False, mode="off"), BannerState(spec_on=True, mode="auto"),
                    BannerState(spec_on=False, mode="auto")):
        assert "switching" not in await first_line(settled)


async def test_the_sglang_release_is_beside_where_the_server_is() -> None:
    lines = await banner_lines(BannerState(spec_on=True, mode="auto", server_state="ready",
                                           source="http://10.0.0.5:30000", version="0.5.23"))
    assert "· http://10.0.0.5:30000 · SGLang 0.5.23" in lines[1], lines
    unsaid = await banner_lines(BannerState(spec_on=True, mode="auto", server_state="ready",
                                            source="http://10.0.0.5:30000"))
    assert "SGLang" not in "".join(unsaid), "a journal from before the field, or a server that does not say"
