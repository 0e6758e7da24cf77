"""Names the supervisor and the SGLang plugin share across the process boundary.

The supervisor launches SGLang with these environment variables and talks to
the plugin through ``/set_internal_state`` keys that start with
``WIRE_PREFIX``. Keeping the names here lets the launcher name them without
importing the plugin package (which reaches into SGLang's internals).
"""

WIRE_PREFIX = "specctl_"  # every /set_internal_state and /get_internal_state key of ours
ENABLE_ENV = "SPECCTL_PLUGIN"  # "1": the plugin takes over SGLang's adaptive policy
SETTINGS_ENV = "SPECCTL_SETTINGS"  # JSON object of PolicySettings fields at start-up
PLUGINS_ENV = "SGLANG_PLUGINS"  # SGLang's own allow-list of plugin entry points
SIM_ADMIN_KEY_ENV = "SPECCTL_SIM_ADMIN_KEY"  # the simulator's admin key, from the supervisor that starts it
# control endpoints an admin key guards (prefixes; /sim/ is the simulator's)
ADMIN_PATHS = ("/set_internal_state", "/flush_cache", "/abort_request", "/sim/")
COSTS_ENV = "SPECCTL_DEPTH_COSTS"  # path of the step-time table per (batch, depth) the depth choice prices with
# The key, in the plugin's ``specctl`` block of /get_internal_state (so /server_info), that says the
# target's routed experts as its HF config counts them: 0 for a dense model (rows are measured per
# model class and apply only to their own: runtime/core/thresholds.py). Absent from an older plugin's block.
EXPERTS_KEY = "experts"
FALSE_WORDS = ("0", "false", "no", "off")  # what switches a SPECCTL_* flag off, in any case


def env_flag(raw: str | None, default: bool) -> bool:
    """A SPECCTL_* on/off variable's value: FALSE_WORDS are False, anything else True; unset or blank the default."""
    if raw is None or raw.strip() == "":
        return default
    return raw.strip().lower() not in FALSE_WORDS
# The switch warm-up's /set_internal_state key (runtime/sglang_plugin/switch_warmup.py), never an operator's:
# a built depth to run every decode batch at while the policy stands aside (it neither decides nor hears
# acceptance, so a warm-up leaves no trace in its state), or HAND_BACK to give the decisions back to it.
WARMUP_KEY = "specctl_warmup"
HAND_BACK = -1
WARMUP_ENV = "SPECCTL_WARMUP"  # "0" skips the switch warm-up; a number caps its largest batch
