"""A stand-in for sgl-flash-mla (MLA models only), left out of path D's wheels.

SGLang 0.5.23's EAGLE v2 worker imports its FlashMLA backend while capturing
graphs, whatever the model; a Llama target never calls it. Anything called here
raises, so a model that did need FlashMLA would fail loudly.
"""


def _absent(*_args: object, **_kwargs: object) -> None:
    raise NotImplementedError("flash_mla is a stand-in on this machine (bench/gpu/stubs)")


fused_norm_rope_attn_rope_cast = _absent


def __getattr__(name: str) -> object:
    return _absent
