"""The model server as the simulator sees it: how fast the games holding a slot get tokens.

Figures from the field's Flash-Next runs on the Kaggle RTX PRO 6000 (FIELD.md §4):

* decode: the aggregate is ~169 * running^0.6 tokens/s (~700 at 10 streams, ~900-1,150 at
  14-16), shared equally by the games decoding at the moment (per-request speed is flat in
  context), so one stream gets 169 * n^-0.4;
* prefill: ~11K tokens/s; a game pays it for its whole context after a trim (the cached
  prefix is gone) or when it resumes after waiting (another game's KV took its place), and
  for the turn's new tokens (tool results, the next user message) otherwise;
* between two requests a game runs its tool call: `tool_s` seconds, during which it holds its
  slot without decoding (the kernel, the game's actions).

Assumptions (not measured here): prefill does not slow the decoders down (vLLM's chunked
prefill does take batch budget, so this flatters frequent yields a little); a game's turn
sizes do not depend on the speed it gets.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Server:
    decode_coef: float = 169.0  # tokens/s at one stream
    decode_exp: float = 0.6  # aggregate ~ running^exp
    prefill_tps: float = 11_000.0
    tool_s: float = 2.0  # a tool call with its actions, typically (30 s at most)
    first_prompt_tokens: int = 4_000  # the system prompt and the first turn's message

    def aggregate(self, n: int) -> float:
        return self.decode_coef * n ** self.decode_exp if n > 0 else 0.0

    def per_stream(self, n: int) -> float:
        return self.decode_coef * n ** (self.decode_exp - 1.0) if n > 0 else 0.0

    def prefill_s(self, tokens: float) -> float:
        return max(0.0, tokens) / self.prefill_tps
