"""Opening and playing ARC-AGI-3 games through the official `arc_agi` toolkit.

Two sources of games, one handle:

* `GameSource.offline(dir)`: every `metadata.json` under an environments folder, played
  in-process by `arc_agi` in OFFLINE mode (the public games, or our tests/games).
* `GameSource.competition(url, api_key)`: the Kaggle gateway in COMPETITION mode, one
  scorecard shared by all games, closed by `GameSource.close()` whatever happened.

`Game` wraps one `EnvironmentWrapper` and gives every policy the same contract:
`reset()` / `step(action)` return an `Observation` that keeps *all* frames of the
animation; actions are `Action` values with readable names (UP, DOWN, LEFT, RIGHT,
SPACE, CLICK x,y, UNDO = ACTION7, RESET). The handle also hides the toolkit's traps
(see DESIGN §1b): a non-RESET step after GAME_OVER/WIN returns no frames, a RESET on a
level with no actions restarts the whole game outside competition mode, and the wrapper
swallows exceptions and returns None.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from arcengine import GameAction, GameState

from duck.game.actions import Action
from duck.game.toolkit import import_toolkit

# arc_agi without the matplotlib it imports for a render window duck never opens (duck.game.toolkit).
_arc_agi = import_toolkit()
Arcade, OperationMode = _arc_agi.Arcade, _arc_agi.OperationMode

log = logging.getLogger(__name__)
# arc_agi.scorecard installs its own INFO handler on stdout at import; keep stdout for results.
logging.getLogger("arc_agi.scorecard").setLevel(logging.WARNING)


class GameError(RuntimeError):
    """The toolkit failed to load or step a game."""


@dataclass(frozen=True)
class Observation:
    """What one reset or step returned. `frames[-1]` is the current board."""

    frames: list[np.ndarray]
    state: str  # NOT_FINISHED, WIN or GAME_OVER
    levels_completed: int
    win_levels: int
    available_actions: list[int]

    @property
    def grid(self) -> np.ndarray:
        return self.frames[-1]

    @property
    def done(self) -> bool:
        return self.state in ("WIN", "GAME_OVER")


def _observation(raw: Any) -> Observation:
    # Copies, read-only: arcengine hands back its own int8 buffers and redraws a frame it
    # returned earlier in place on a later step (bp35: the board after a RESET turned into
    # the board after the next click), so a view would rewrite history under every reader.
    frames = []
    for f in raw.frame:
        a = np.array(f, dtype=np.int8, copy=True)
        a.flags.writeable = False
        frames.append(a)
    state = raw.state.name if isinstance(raw.state, GameState) else str(raw.state)
    return Observation(frames, state, int(raw.levels_completed), int(raw.win_levels),
                       sorted(int(a) for a in raw.available_actions))


@dataclass
class Game:
    """One game being played. Counts actions the way the scorecard does."""

    game_id: str
    env: Any
    baselines: list[int] | None
    title: str = ""
    competition: bool = False
    # The folder the game's files (source, metadata) were loaded from, None through a gateway:
    # the sandbox fences it, since model code that reads a game's source makes scores meaningless.
    files_dir: str | None = None
    obs: Observation | None = None
    actions: int = 0  # every step sent, RESETs after the game-creating one included
    level_actions: int = 0  # actions since the current level (or attempt) began
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def levels(self) -> int:
        return self.obs.levels_completed if self.obs else 0

    @property
    def win_levels(self) -> int:
        if self.obs and self.obs.win_levels:
            return self.obs.win_levels
        return len(self.baselines or [])

    def reset(self) -> Observation:
        """The observation of the game as created (the toolkit resets on make())."""
        raw = self.env.observation_space
        if raw is None or not raw.frame:
            raw = self.env.reset()
        if raw is None or not raw.frame:
            raise GameError(f"{self.game_id}: the toolkit returned no initial frame")
        self.obs = _observation(raw)
        return self.obs

    def would_restart_game(self, action: Action) -> bool:
        """A RESET on a level with no actions restarts the whole game offline and does
        nothing (but still costs an action) in competition mode: never useful."""
        return action.id == 0 and self.level_actions == 0

    def step(self, action: Action) -> Observation:
        """Send one action. Returns the new observation, with every animation frame."""
        if self.obs is None:
            self.reset()
        if self.would_restart_game(action):
            raise GameError("RESET refused: this level has no actions yet, so it would "
                            "restart the whole game (or waste an action in competition)")
        if self.obs.done and action.id != 0:
            # After GAME_OVER/WIN only RESET does anything; the toolkit would answer with no
            # frames and the scorecard would not count it, so it is not sent at all.
            return self.obs
        with self._lock:
            raw = self.env.step(GameAction.from_id(action.id),
                                data={"x": action.x, "y": action.y} if action.id == 6 else None)
        if raw is None:
            raise GameError(f"{self.game_id}: the toolkit failed on {action}")
        before = self.obs
        if not raw.frame:
            return before  # the scorecard counts only steps that returned frames
        self.actions += 1
        obs = _observation(raw)
        if action.id == 0 or obs.levels_completed != before.levels_completed:
            self.level_actions = 0
        else:
            self.level_actions += 1
        self.obs = obs
        return obs


@dataclass
class GameInfo:
    game_id: str
    title: str
    baselines: list[int] | None
    local_dir: str | None
    error: str | None = None  # its metadata.json could not be read: listed, played as an error


def _unloadable(games_dir: Path, loaded: set[str]) -> list[GameInfo]:
    """The metadata.json files under `games_dir` that the toolkit skipped (it only logs a
    warning), each as a game with an error: named by its `game_id` if one can be read, else
    by its folders (`zc01/00000001` -> `zc01-00000001`, the toolkit's own naming)."""
    out = []
    for meta in sorted(games_dir.rglob("metadata.json")):
        folder = str(meta.parent)
        if folder in loaded:
            continue
        rel = meta.parent.relative_to(games_dir).parts  # <id>/<version>/ by the toolkit's layout
        gid, why = "-".join(rel) or games_dir.name, "corrupt or incomplete metadata.json"
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("game_id"), str) and data["game_id"].strip():
                gid = data["game_id"].strip()
            why = "incomplete metadata.json (the toolkit could not load it)"
        except (OSError, UnicodeDecodeError, ValueError) as e:
            why = f"corrupt metadata.json ({type(e).__name__}: {str(e)[:120]})"
        out.append(GameInfo(gid, gid, None, folder, f"{gid}: {why} at {meta}"))
    return out


def matches(game_id: str, names: Iterable[str]) -> bool:
    """Whether `names` names this game: by its full id or its 4-letter prefix (`ls20` for
    `ls20-0c556536`), as every `--only` option takes them."""
    names = set(names)
    return game_id in names or game_id.split("-")[0] in names


def offline_game_ids(games_dir: str | Path, only: Iterable[str] | None = None) -> list[str]:
    """The ids of an environments folder's games that `only` names (all without it); GameError
    (one line) when the folder is missing, a name matches no game, or it holds none."""
    ids = GameSource.offline(games_dir).game_ids(only)
    if not ids:
        raise GameError(f"no games found under {games_dir}")
    return ids


class GameSource:
    """A set of games reachable through one `Arcade` and one scorecard."""

    def __init__(self, arcade: Arcade, competition: bool, games_dir: Path | None = None) -> None:
        self.arcade = arcade
        self.competition = competition
        self.games_dir = games_dir
        self.card_id: str | None = None
        # One thread at a time through the Arcade (the scorecard, and make(), which the
        # toolkit does not mean for threads); reentrant since make() opens the scorecard.
        self._lock = threading.RLock()

    @classmethod
    def offline(cls, games_dir: str | Path) -> "GameSource":
        games_dir = Path(games_dir)
        if not games_dir.is_dir():
            raise GameError(f"no games folder at {games_dir}")
        # arc_agi lets OPERATION_MODE=competition in the environment override the
        # constructor's mode; an offline source must stay offline whatever is set.
        saved = os.environ.pop("OPERATION_MODE", None)
        try:
            arcade = Arcade(operation_mode=OperationMode.OFFLINE, environments_dir=str(games_dir),
                            logger=logging.getLogger("arc_agi"))
        finally:
            if saved is not None:
                os.environ["OPERATION_MODE"] = saved
        return cls(arcade, competition=False, games_dir=games_dir.resolve())

    @classmethod
    def competition(cls, url: str, api_key: str = "test-key-123") -> "GameSource":
        arcade = Arcade(arc_api_key=api_key, arc_base_url=url.rstrip("/"),
                        operation_mode=OperationMode.COMPETITION,
                        environments_dir=os.devnull, logger=logging.getLogger("arc_agi"))
        return cls(arcade, competition=True)

    def games(self) -> list[GameInfo]:
        """Every game of the source; offline, also those whose metadata.json the toolkit could
        not load (with `error` set: `make` raises it, so the run records the game as failed)."""
        seen: dict[str, GameInfo] = {}
        for e in self.arcade.get_environments():
            seen.setdefault(e.game_id, GameInfo(e.game_id, e.title or e.game_id,
                                                e.baseline_actions, e.local_dir))
        if self.games_dir is not None:
            loaded = {str(Path(g.local_dir).resolve()) for g in seen.values() if g.local_dir}
            for g in _unloadable(self.games_dir, loaded):
                seen.setdefault(g.game_id, g)
        return sorted(seen.values(), key=lambda g: g.game_id)

    def game_ids(self, only: Iterable[str] | None = None) -> list[str]:
        """Every game's id, sorted; with `only`, those it names (`matches`). A name that
        matches no game is an error, not an empty run."""
        ids = [g.game_id for g in self.games()]
        if not only:
            return ids
        unknown = [n for n in only if not any(matches(g, [n]) for g in ids)]
        if unknown:
            from difflib import get_close_matches
            names = ids + sorted({g.split("-")[0] for g in ids})  # the ids and their 4-letter prefixes
            near = get_close_matches(unknown[0], names, n=3)
            raise GameError(f"no game named {', '.join(unknown)} among {len(ids)} games"
                            + (f" (did you mean {', '.join(near)}?)" if near else ""))
        return [g for g in ids if matches(g, only)]

    def open_scorecard(self, tags: list[str] | None = None) -> str:
        with self._lock:
            if self.card_id is None:
                self.card_id = self.arcade.open_scorecard(tags=tags or ["duck"])
            return self.card_id

    def make(self, game_id: str) -> Game:
        """Create the game on this source's scorecard (opened on first use); one make() at a
        time, whatever the number of threads playing."""
        with self._lock:
            card = self.open_scorecard()
            info = next((g for g in self.games() if g.game_id == game_id), None)
            if info is not None and info.error:
                raise GameError(info.error)
            try:
                env = self.arcade.make(game_id, scorecard_id=card)
            except Exception as e:  # a broken game file raises from exec() or the constructor
                raise GameError(f"{game_id}: could not be created: {e}") from e
            if env is None or (not self.competition and getattr(env, "_game", None) is None):
                raise GameError(f"{game_id}: the toolkit could not create it (see the arc_agi log)")
            game = Game(game_id, env, info.baselines if info else None,
                        title=info.title if info else game_id, competition=self.competition,
                        files_dir=str(self.games_dir) if self.games_dir else None)
            game.reset()
        return game

    def scorecard(self) -> Any:
        """The toolkit's own scorecard (local mode; the gateway hides it until closed)."""
        return self.arcade.get_scorecard(self.card_id) if self.card_id else None

    def close(self) -> Any:
        """Close the scorecard; safe to call twice."""
        with self._lock:
            card, self.card_id = self.card_id, None
        return self.arcade.close_scorecard(card) if card else None
