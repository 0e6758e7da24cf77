"""SGLang 0.5.23's bookkeeping loop of ``alloc_for_spec_decode``, for 0.5.17: one ``tolist``, not 512 tensor ops.

Why: profiled on one H200 with FA3 at batch 256 (docs/sglang-plugin.md), specctl's off step was CPU-bound: its scheduler
thread needed about 2 ms a step more than the GPU, and 0.5.17's
``alloc_for_spec_decode`` (``mem_cache/allocation.py``) was the largest
single part of that. It ends with

    for i, req in enumerate(reqs):
        req.kv.kv_allocated_len = max(req.kv.kv_allocated_len, int(nxt_kv_lens_cpu[i]))

a tensor ``select`` and an ``item()`` per request (256 of each a step),
which every speculative decode step pays, on or off. SGLang 0.5.23 replaced
it with one ``nxt_kv_lens_cpu.tolist()`` and a loop over plain ints; this
AROUND hook does the same for 0.5.17 without copying the function: it calls
the original with ``reqs`` replaced by a stand-in that has the batch's
length (the only other use of ``reqs`` there, the size passed to
``assign_req_to_token_pool_func``) and nothing to iterate, then runs the
loop itself over a list. The contract tests check, in each release's
source, that ``reqs`` is used exactly so (and run the wheel's function with
and without the hook on the same inputs); 0.5.23 does not get the hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


class SizedNothing:
    """A stand-in for ``reqs``: ``len`` is the batch's, iterating yields nothing."""

    __slots__ = ("_n",)

    def __init__(self, n: int) -> None:
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Any]:
        return iter(())


def around_alloc_for_spec_decode(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run the original without its per-request loop, then that loop over a list (see module doc).

    ``reqs`` and ``nxt_kv_lens_cpu`` are keyword-only parameters of the original.
    """
    reqs = kwargs["reqs"]
    out = original(*args, **{**kwargs, "reqs": SizedNothing(len(reqs))})
    for req, nxt in zip(reqs, kwargs["nxt_kv_lens_cpu"].tolist(), strict=True):
        req.kv.kv_allocated_len = max(req.kv.kv_allocated_len, nxt)
    return out
