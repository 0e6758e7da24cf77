"""The stand-in's submodule: only the name SGLang 0.5.23 imports at module level."""


class FlashMLASchedMeta:
    """Never built on a Llama target."""

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        raise NotImplementedError("flash_mla is a stand-in on this machine (bench/gpu/stubs)")
