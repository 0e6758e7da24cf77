"""The console's themes: colours live here, as Theme objects, and nowhere else.

TCSS and widgets refer only to theme variables ($success, $error, $warning,
$accent, ...), so switching theme recolours everything live. The spec banner
leans on $success (speculation on), $error (off) and $warning (SIM, forced
modes); the high-contrast theme keeps those far apart for colour-blind eyes
and projectors.
"""

from __future__ import annotations

from textual.theme import Theme

DARK = Theme(
    name="specctl-dark",
    primary="#4C9BE8",
    secondary="#7A8FA6",
    accent="#B48EF0",
    warning="#E5B454",
    error="#E5606B",
    success="#5BC27A",
    foreground="#D8DEE6",
    background="#12161C",
    surface="#1A2029",
    panel="#232B36",
    dark=True,
)

LIGHT = Theme(
    name="specctl-light",
    primary="#1F63B5",
    secondary="#55667A",
    accent="#7A3FC4",
    warning="#A86A00",
    error="#C02635",
    success="#1E7F3C",
    foreground="#1C232B",
    background="#F7F8FA",
    surface="#ECEFF3",
    panel="#DDE3EA",
    dark=False,
)

HIGH_CONTRAST = Theme(
    name="specctl-contrast",
    primary="#FFFFFF",
    secondary="#BBBBBB",
    accent="#00FFFF",
    warning="#FFFF00",
    error="#FF4040",
    success="#00FF66",
    foreground="#FFFFFF",
    background="#000000",
    surface="#000000",
    panel="#1A1A1A",
    dark=True,
    luminosity_spread=0.25,
)

THEMES: tuple[Theme, ...] = (DARK, LIGHT, HIGH_CONTRAST)
DEFAULT_THEME = DARK.name
