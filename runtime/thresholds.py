"""Load thresholds that suit the server's attention backend, from measurement.

Where speculation stops paying depends less on the model than on how fast the
attention backend serves a verify: on one H200 (docs/gpu-results.md, SGLang
0.5.17, Llama-8B shapes, acceptance length 2.8) static EAGLE-3 and no
speculation are level at 32 requests with Triton, whose verify runs its extend
kernel, while with FA3 static EAGLE-3 was ahead at every concurrency measured
(1.38x at 256). One threshold cannot serve both, so when specctl launches a
server and the operator set no load threshold, the supervisor reads the backend
SGLang chose from /server_info and applies the matching pair below.
Backends not listed (flashinfer, trtllm, ...) keep the policy's defaults: they
were not measured.
"""

from __future__ import annotations

from typing import Any

# off_at above any max-running-requests means "never off for load"; the
# acceptance rule (min_accept) still turns speculation off where drafts miss.
# With FA3 the simulator, calibrated to the sweep, puts the break-even at an
# accept length of 1.3-1.5 up to 64 requests (docs/simulator.md), so FA3 keeps
# drafting down to 0.5 accepted draft tokens a verify rather than the default 1.3.
NEVER = 1 << 20
BY_BACKEND: dict[str, dict[str, float]] = {
    "triton": {"off_at": 32, "on_at": 24},
    "fa3": {"off_at": NEVER, "on_at": NEVER - 1, "min_accept": 0.5},
}


def attention_backend(info: dict[str, Any] | None) -> str | None:
    """The backend SGLang resolved, as /server_info reports it."""
    value = (info or {}).get("attention_backend")
    return value.lower() if isinstance(value, str) and value else None


def for_backend(backend: str | None) -> dict[str, float] | None:
    """The measured thresholds for ``backend``, or None where none were measured."""
    if backend is None:
        return None
    pair = BY_BACKEND.get(backend)
    return dict(pair) if pair else None
