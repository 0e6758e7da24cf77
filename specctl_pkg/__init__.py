"""specctl: an operations console for speculative-decoding SGLang servers."""

__version__ = "0.1.0"
PROTOCOL = 1

