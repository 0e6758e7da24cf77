"""What a simulated request outputs: token ids made lazily, their text, logprobs, stop strings and EOS.

The simulator has no model and no tokenizer. A request's output ids come from
a stream seeded by what decides them on a real server: greedy decoding
(``temperature`` 0) by the prompt alone, so every call, replica and ``--seed``
agrees; a request ``seed`` by that seed and the prompt; otherwise by the
server's seed and the request. Ids are made as the engine produces them, never
all up front. Each id stands for one word; a token's text is its word, with a
space before all but the first, so text and tokens line up exactly and stop
strings can be matched and cut as SGLang cuts them.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

VOCAB = 128_256  # Llama 3's vocabulary
EOS_ID = 128_009  # Llama 3's <|eot_id|>, what matched_stop names when the model "stops" by itself
WORDS = ("the", "model", "drafts", "tokens", "and", "verifies", "them", "in", "one", "pass", "a", "server",
         "runs", "many", "requests", "at", "once", "while", "speculation", "turns", "off", "under", "load", "then",
         "back", "on", "when", "it", "is", "quiet", "again", "fast")  # 32: a top-k of alternatives has distinct words


def word(token_id: int) -> str:
    return WORDS[token_id % len(WORDS)]


def token_text(index: int, token_id: int) -> str:
    """The text of the ``index``-th output token: its word, a space before all but the first."""
    return word(token_id) if index == 0 else " " + word(token_id)


def words(ids: list[int]) -> str:
    """Stand-in text for token ids: one word a token."""
    return " ".join(word(i) for i in ids)


def prompt_ids(text: str) -> list[int]:
    """Stand-in ids of a text prompt (for echo with logprobs): one a word."""
    return [sum(map(ord, w)) % VOCAB for w in text.split()] or [0]


class TokenSource:
    """A request's output ids and logprobs, drawn on demand from a stream seeded by ``key``."""

    def __init__(self, key: str, *, greedy: bool) -> None:
        self.key = key
        self.greedy = greedy
        self._ids = random.Random(key)
        self._lps = random.Random(key + "/logprobs")

    def take(self, n: int) -> list[int]:
        rand = self._ids.randrange
        return [rand(VOCAB) for _ in range(n)]

    def eos_after(self, low: int, high: int) -> int:
        """Where the model would emit EOS: a length drawn from the preset's output range, per stream."""
        return random.Random(self.key + "/eos").randint(low, max(low, high))

    def logprobs(self, ids: list[int], top: int) -> list[tuple[float, list[tuple[int, float]]]]:
        """Per id: its logprob and the ``top`` most likely ids with theirs, highest first.

        Plausible values: probabilities that sum to at most 1; under greedy decoding the chosen id is the
        most likely one.
        """
        out = []
        for token_id in ids:
            u = self._lps.random()
            p = math.exp(-u * 1.0986) if self.greedy else math.exp(-3.0 * u * u)  # greedy: p >= 1/3
            lp = math.log(p)
            alts: list[tuple[int, float]] = [(token_id, lp)]
            rest = 1.0 - p
            for j in range(1, top):
                alt_p = rest * 0.5 ** j
                alts.append(((token_id + 15 * j) % VOCAB, math.log(alt_p) if alt_p > 0 else -9999.0))
            alts.sort(key=lambda a: -a[1])
            out.append((round(lp, 6), [(i, round(v, 6)) for i, v in alts[:top]]))
        return out


@dataclass(frozen=True)
class Stop:
    """Stop strings: where one first appears in the text, the output ends before it."""

    strings: tuple[str, ...]

    def find(self, text: str, start: int) -> tuple[int, str] | None:
        """The earliest stop string beginning at or after ``start`` in ``text``: (position, string)."""
        best: tuple[int, str] | None = None
        for s in self.strings:
            at = text.find(s, start)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, s)
        return best

    @property
    def longest(self) -> int:
        return max(map(len, self.strings), default=0)


def source_key(prompt: str, *, greedy: bool, seed: int | None, server_seed: int, request: int,
               choice: int = 0) -> tuple[str, bool]:
    """The key of a request's id stream and whether it is greedy (see the module's docstring)."""
    if greedy:
        return f"greedy:{prompt}", True
    if seed is not None:
        return f"seed:{seed}:{choice}:{prompt}", False
    return f"request:{server_seed}:{request}", False
