"""Images of `duck report` (and of the A/B page, duck.lab.report.ab): a matplotlib figure as a
PNG, PNGs as data URIs (so the HTML stays one file), and the run report's plots: levels over
time and over actions per game, and the score per game. Boards: duck.game.frames.grid_png."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np

from duck.lab.report.views import GameView


# -- Images -----------------------------------------------------------------------------

def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def figure(width: float, height: float) -> Any:
    """A matplotlib Figure outside pyplot: nothing global to switch (the backend) or clean up."""
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height))


def fig_png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


# -- Plots ------------------------------------------------------------------------------

def game_plot(view: GameView) -> bytes:
    fig = figure(11.5, 2.7)
    axes = fig.subplots(1, 3)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.17, top=0.9, wspace=0.25)
    t = [c[0] for c in view.curve]
    n = [c[1] for c in view.curve]
    lv = [c[2] for c in view.curve]
    top = max(1, view.score.levels_total)
    axes[0].step(t, lv, where="post", color="#1E93FF")
    axes[0].set_xlabel("seconds")
    axes[0].set_ylabel("levels completed")
    axes[0].set_title("levels over time", fontsize=9)
    axes[1].step(n, lv, where="post", color="#4FCC30")
    axes[1].set_xlabel("actions")
    axes[1].set_title("levels over actions", fontsize=9)
    for ax in axes[:2]:
        ax.set_ylim(-0.1, top + 0.1)
        ax.yaxis.get_major_locator().set_params(integer=True)
    ax = axes[2]
    nums = [lev.number for lev in view.levels]
    if nums:
        x = np.arange(len(nums))
        ours = [lev.actions for lev in view.levels]
        base = [lev.baseline or 0 for lev in view.levels]
        colors = ["#FF851B" if lev.completed else "#CCCCCC" for lev in view.levels]
        ax.bar(x - 0.2, ours, width=0.4, color=colors, label="ours (grey: unfinished)")
        ax.bar(x + 0.2, base, width=0.4, color="#333333", label="human baseline")
        ax.set_xticks(x, [str(v) for v in nums])
        ax.legend(fontsize=7)
    ax.set_xlabel("level")
    ax.set_ylabel("actions")
    ax.set_title("actions vs human baseline", fontsize=9)
    for a in axes:
        a.tick_params(labelsize=7)
    return fig_png(fig)


def overview_plot(views: list[GameView]) -> bytes:
    fig = figure(max(6.0, 0.42 * len(views) + 1.5), 3.0)
    ax = fig.subplots()
    x = np.arange(len(views))
    ax.bar(x, [v.score.score for v in views], color="#1E93FF", label="this run")
    duck = [(i, v.duck["mean_score"]) for i, v in enumerate(views) if v.duck and "mean_score" in v.duck]
    if duck:
        ax.scatter([d[0] for d in duck], [d[1] for d in duck], marker="_", s=160, color="#F93C31",
                   label="Duck mean", zorder=3)
    ax.set_xticks(x, [v.game_id.split("-")[0] for v in views], rotation=90, fontsize=7)
    ax.set_ylabel("score (%)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig_png(fig)
