"""Playing every game of a folder and writing a run folder (`duck play`).

A run folder holds `records/<game_id>.jsonl` (one per game, see duck.play.record),
`conversations/<game_id>.jsonl.gz` (one per game a model played, see duck.play.conversation;
`play.conversations` false: none) and `score.json` (see duck.play.scoring). The engine is pure Python under the GIL, so games run
in separate processes when `play.workers > 1`; each worker opens its own `GameSource`.
"""

from __future__ import annotations

import logging
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from duck.config import Config, load_config, with_values
from duck.game.source import GameSource
from duck.play.scoring import write_score
from duck.play.session import GameResult, play_game
from duck.policies import make_policy

log = logging.getLogger(__name__)


def _play_one(games_dir: str, game_id: str, cfg: Config, out: str) -> GameResult:
    p = cfg.play
    return play_game(GameSource.offline(games_dir), game_id, make_policy(p.policy, p.seed, config=cfg),
                     max_actions=p.max_actions, record_path=Path(out) / "records" / f"{game_id}.jsonl",
                     seed=p.seed, config=cfg.model_dump(mode="json"), conversation=p.conversations)


def play_folder(games_dir: str | Path, out: str | Path, cfg: Config | None = None, *,
                policy: str | None = None, seed: int | None = None, max_actions: int | None = None,
                workers: int | None = None, options: dict[str, Any] | None = None,
                games: list[str] | None = None, overwrite: bool = False) -> dict:
    """Play each game of `games_dir` (or those `games` names: ids or 4-letter prefixes) once
    with the config's `play` section (default: `load_config()`), whose fields the keyword
    arguments replace (`options`: the explorer's); returns (and writes) the score.json document."""
    values = {f"play.{k}": v for k, v in (("policy", policy), ("seed", seed), ("max_actions", max_actions),
                                          ("workers", workers)) if v is not None}
    if options is not None:
        values["explorer.options"] = dict(options)
    cfg = with_values(cfg or load_config(), values)
    games_dir, out = Path(games_dir), Path(out)
    old = sorted((out / "records").glob("*.jsonl"))
    if old and not overwrite:
        raise SystemExit(f"{out} already holds records; choose another --out or pass --overwrite")
    ids = GameSource.offline(games_dir).game_ids(games)
    if not ids:
        raise SystemExit(f"no games found under {games_dir}")
    for f in old:
        f.unlink()
    for f in (out / "conversations").glob("*.jsonl*"):  # (play_game replaces those it plays)
        f.unlink()
    (out / "records").mkdir(parents=True, exist_ok=True)
    args = [(str(games_dir), g, cfg, str(out)) for g in ids]
    if cfg.play.workers > 1:
        with ProcessPoolExecutor(max_workers=cfg.play.workers) as pool:
            results = list(pool.map(_play_one, *zip(*args)))
    else:
        results = [_play_one(*a) for a in args]
    for r in results:
        log.info("%s: levels %d, actions %d, %s%s", r.game_id, r.levels, r.actions, r.end_reason,
                 f" ({r.error})" if r.error else "")
    return write_score(out)
