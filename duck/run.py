"""Playing every game of a folder and writing a run folder.

A run folder holds `records/<game_id>.jsonl` (one per game, see duck.play.record) and
`score.json` (see duck.play.scoring). The engine is pure Python under the GIL, so games run in
separate processes when `workers > 1`; each worker opens its own `GameSource`.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from duck.game.source import GameSource
from duck.play.session import GameResult, play_game
from duck.policies import make_policy
from duck.play.record import read_records
from duck.play.scoring import score_json, score_record

log = logging.getLogger(__name__)

BUNDLED_GAMES = Path(__file__).resolve().parent.parent / "tests" / "games"


def _play_one(games_dir: str, game_id: str, policy: str, seed: int, max_actions: int,
              out: str, options: dict[str, Any]) -> GameResult:
    source = GameSource.offline(games_dir)
    return play_game(source, game_id, make_policy(policy, seed, **options), max_actions=max_actions,
                     record_path=Path(out) / "records" / f"{game_id}.jsonl", seed=seed,
                     config={"policy": policy, "seed": seed, "max_actions": max_actions, **options})


def play_folder(games_dir: str | Path, out: str | Path, *, policy: str = "random", seed: int = 0,
                max_actions: int = 200, workers: int = 1, games: list[str] | None = None,
                options: dict[str, Any] | None = None, overwrite: bool = False) -> dict:
    """Play each game of `games_dir` once; returns (and writes) the score.json document."""
    games_dir, out = Path(games_dir), Path(out)
    old = sorted((out / "records").glob("*.jsonl"))
    if old and not overwrite:
        raise SystemExit(f"{out} already holds records; choose another --out or pass --overwrite")
    for f in old:
        f.unlink()
    (out / "records").mkdir(parents=True, exist_ok=True)
    ids = [g.game_id for g in GameSource.offline(games_dir).games()]
    if games:
        wanted = set(games)
        ids = [g for g in ids if g in wanted or g.split("-")[0] in wanted]
    if not ids:
        raise SystemExit(f"no games found under {games_dir}")
    args = [(str(games_dir), g, policy, seed, max_actions, str(out), options or {}) for g in ids]
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(_play_one, *zip(*args)))
    else:
        results = [_play_one(*a) for a in args]
    for r in results:
        log.info("%s: levels %d, actions %d, %s%s", r.game_id, r.levels, r.actions, r.end_reason,
                 f" ({r.error})" if r.error else "")
    return write_score(out)


def write_score(run_dir: str | Path) -> dict:
    """Recompute `score.json` from the records of a run folder."""
    run_dir = Path(run_dir)
    records = read_records(run_dir)
    doc = score_json([score_record(r) for r in records])
    toolkit = {}
    for r in records:
        ev = next((e for e in r.events if e["kind"] == "scorecard"), None)
        if ev:
            toolkit[r.game_id] = ev["data"]["score"]
    if toolkit and len(toolkit) == len(records):
        # The toolkit's own per-game scores, kept beside ours so anyone can compare them.
        doc["toolkit_score"] = sum(toolkit.values()) / len(toolkit)
    (run_dir / "score.json").write_text(json.dumps(doc, indent=1))
    return doc
