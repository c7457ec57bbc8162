"""The Duck's recorded game-runs as turn-by-turn token curves (../shared/duck-traces).

The harness recorded no token counts (duck-traces/README.md), only characters. They are
converted with the chars-per-token measured on this tokenizer family (FIELD.md §3: English
3.5-4.2, code 2.2-2.7, tool results 1.0-1.6), at the middle of each range:

* generated tokens of a turn = (reasoning + visible text) / 3.8 + code / 2.5 + 16 per model
  response (the tool-call wrapper);
* context growth of a turn = its generated tokens (past reasoning stays in the history) + tool
  results / 1.3 + the turn's user message: its state text / 3.8 plus 402 tokens for the board
  image (Franzen's 640 px image).

Everything else comes from the record as is: the actions and levels after each turn, and the
action number that completed each level (for the official per-level score). A 45-minute run is
far shorter than a game's share of a 9-hour run: devkit.simulator.extend extends it.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from duck.play.scoring import game_score

TEXT_CHARS_PER_TOKEN = 3.8
CODE_CHARS_PER_TOKEN = 2.5
TOOL_CHARS_PER_TOKEN = 1.3
CALL_WRAPPER_TOKENS = 16
IMAGE_TOKENS = 402


@dataclass(frozen=True)
class TokenRun:
    """One recorded game-run, turn by turn (index k: after turn k)."""

    game_id: str
    pass_: int
    baselines: tuple[int, ...]
    gen: tuple[int, ...]  # generated tokens of each turn
    growth: tuple[int, ...]  # context growth of each turn (generated tokens included)
    actions: tuple[int, ...]  # actions after each turn
    levels: tuple[int, ...]  # levels completed after each turn
    level_actions: tuple[int, ...]  # cumulative action number that completed level i

    @property
    def total_levels(self) -> int:
        return len(self.baselines)

    @property
    def tokens(self) -> int:
        return sum(self.gen)

    def level_tokens(self) -> tuple[int, ...]:
        """Cumulative generated tokens at each level completion."""
        out, cum, lv = [], 0, 0
        for g, n in zip(self.gen, self.levels):
            cum += g
            while lv < n:
                out.append(cum)
                lv += 1
        return tuple(out)

    def late_actions_per_token(self, share: float = 1 / 3, floor: float = 1e-4) -> float:
        """Actions per generated token over the last `share` of the run's tokens (the pace at
        which the recording stopped), floored: a run that idled still acts again eventually."""
        total = self.tokens
        cut, cum, a0 = total * (1 - share), 0, 0
        for g, a in zip(self.gen, self.actions):
            cum += g
            if cum <= cut:
                a0 = a
        return max(floor, (self.actions[-1] - a0) / max(1.0, total * share)) if self.actions else floor

    def score(self) -> float:
        per = [b - a for a, b in zip((0,) + self.level_actions, self.level_actions)]
        return game_score(self.baselines, per)


def _turn_tokens(t: dict) -> tuple[int, int]:
    text = t.get("reasoning_chars", 0) + sum(r.get("content_chars", 0) for r in t.get("model_responses", []))
    code = sum(len(c.get("code") or "") for c in t.get("calls", []))
    gen = int(text / TEXT_CHARS_PER_TOKEN + code / CODE_CHARS_PER_TOKEN
              + CALL_WRAPPER_TOKENS * max(1, len(t.get("model_responses", []))))
    tool = sum(c.get("result_chars", 0) for c in t.get("calls", [])) / TOOL_CHARS_PER_TOKEN
    prompt = len(t.get("prompt_state") or "") / TEXT_CHARS_PER_TOKEN + IMAGE_TOKENS
    return gen, int(gen + tool + prompt)


def load_token_runs(runs_path: Path, baselines: dict[str, tuple[int, ...]],
                    turns_dir: Path | None = None) -> list[TokenRun]:
    """runs.jsonl plus turns/<game>.jsonl.gz beside it (or `turns_dir`) as TokenRuns."""
    runs_path = Path(runs_path)
    turns_dir = Path(turns_dir) if turns_dir else runs_path.parent / "turns"
    heads = [json.loads(x) for x in runs_path.read_text().splitlines() if x.strip()]
    by_game: dict[str, dict[int, list[dict]]] = {}
    for gid in sorted({h["game_id"] for h in heads}):
        f = turns_dir / f"{gid}.jsonl.gz"
        if not f.exists():
            raise FileNotFoundError(f"no turns for {gid}: {f} (the Duck traces' turns/ folder)")
        with gzip.open(f, "rt") as fh:
            for line in fh:
                t = json.loads(line)
                by_game.setdefault(gid, {}).setdefault(int(t["pass"]), []).append(t)
    out = []
    for h in heads:
        turns = sorted(by_game.get(h["game_id"], {}).get(int(h["pass"]), []), key=lambda t: t["turn_index"])
        if not turns:
            continue
        toks = [_turn_tokens(t) for t in turns]
        nxt = turns[1:] + [None]
        acts = [n["action_num_at_start"] if n else int(h["actions"]) for n in nxt]
        lvls = [n["levels_completed_at_start"] if n else int(h["levels_completed"]) for n in nxt]
        lcs = sorted(h["level_completions"], key=lambda c: c["level"])
        out.append(TokenRun(h["game_id"], int(h["pass"]), baselines[h["game_id"]],
                            tuple(g for g, _ in toks), tuple(w for _, w in toks), tuple(acts), tuple(lvls),
                            tuple(int(c["action_num"]) for c in lcs)))
    return out


def pooled_turns(runs: Sequence[TokenRun]) -> list[tuple[int, int]]:
    """Every recorded turn's (generated tokens, context growth): what synthetic games draw."""
    return [(g, w) for r in runs for g, w in zip(r.gen, r.growth)]
