"""`duck doctor --sweep`: the first-GPU sweep whose output sets the serving profile's defaults.

vLLM is booted once per entry of `BOOTS` (each with room for its largest point), and on each
server the entry's points (slots x context per game) are played for `minutes` through the
doctor's own `play`: MTP as planned and MTP off on vLLM's own CUDA graphs at every point of
`POINTS`, then PIECEWISE graphs (rung 2's) and eager (rung 3's) at the planned point. Per point:
the doctor's figures and checks (devkit.doctor.operating.checks) and whether the boot's vllm.log
shows a download or a compile (devkit.doctor.offline.scan).

The rules: `best` is the passing point of the default graphs with the most decode tokens per
second in total; `graphs` puts PIECEWISE in place of vLLM's default when, at the planned point,
its play held (no errors, the server alive, every check passed) and either its decode is at
least `GRAPHS_MARGIN` (5%) above the default's or the default's did not hold; `set` holds the
config fields that make the result the default: put them into the profile
(duck.config.profiles). Four boots and 8 points x `minutes`: ~50 min (docs/serving.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from duck.config import with_values
from duck.game.gateway import free_port
from devkit.doctor import offline, operating as dr

POINTS = ((10, 131072), (12, 98304), (16, 71680))  # Franzen's 10 x 128K, between, Siriki's 16 x 70K
BUDGET_S = 60 * 60
GRAPHS_MARGIN = 0.05
PLANNED = "planned"  # (a BOOTS entry's points: the plan's own slots x context)


def boots(mtp: int) -> list[tuple[str, dict[str, Any], Any]]:
    """(name, the ServeConfig fields it sets, its points) of each boot, in the order they run."""
    out = [("default graphs, MTP as planned", {"mtp_tokens": mtp}, POINTS),
           ("default graphs, MTP off", {"mtp_tokens": 0}, POINTS),
           ("PIECEWISE graphs, MTP as planned", {"mtp_tokens": mtp, "cudagraph_mode": "PIECEWISE"}, PLANNED),
           ("eager, MTP as planned", {"mtp_tokens": mtp, "enforce_eager": True}, PLANNED)]
    return out if mtp else [out[0]] + out[2:]  # (a profile without MTP: the first two are one boot)


def graphs_of(serve: dict[str, Any]) -> str:
    return "eager" if serve.get("enforce_eager") else serve.get("cudagraph_mode") or "default"


def _point(scfg: Any, server_url: str, boot_s: float, games: Path, only: list[str] | None, minutes: float,
           out: Path, n: int, ctx: int, limits: dict[str, float], alive: Any) -> dict[str, Any]:
    pcfg = with_values(scfg, {"scheduler.slots": n, "agent.context_tokens": ctx})
    p = dr.play(pcfg, server_url, games, only, minutes * 60, out, n=n)
    figures = dr.figures(p, boot_s, scfg.model.serve.mtp_tokens)
    verdicts = dr.checks(figures, n, limits)
    stable = bool(p.get("ok")) and not p.get("errors") and alive()
    return {"figures": figures, "checks": verdicts, "errors": p.get("errors"), "stable": stable,
            "ok": stable and all(c["ok"] for c in verdicts.values())}


def sweep(cfg: Any, out: Path, games: Path, only: list[str] | None, minutes: float,
          limits: dict[str, float] | None = None, network: dict[str, Any] | None = None) -> dict[str, Any]:
    from duck.llm.serve import VLLMServer
    out.mkdir(parents=True, exist_ok=True)
    limits = {**dr.LIMITS, **(limits or {})}
    t0 = time.monotonic()
    most, longest = max(n for n, _ in POINTS), max(c for _, c in POINTS)
    planned = (cfg.plan.slots, cfg.plan.context_tokens)
    rows: list[dict[str, Any]] = []
    for k, (name, serve, points) in enumerate(boots(cfg.model.serve.mtp_tokens)):
        points = [planned] if points == PLANNED else list(points)
        scfg = with_values(cfg, {**{f"model.serve.{f}": v for f, v in serve.items()},
                                 "model.serve.max_num_seqs": most + 1, "model.serve.max_model_len": longest,
                                 "scheduler.slots": most, "agent.context_tokens": min(longest, cfg.agent.context_tokens)})
        key = {"boot": name, "mtp_tokens": scfg.model.serve.mtp_tokens, "graphs": graphs_of(serve)}
        if time.monotonic() - t0 > BUDGET_S:
            rows += [key | {"slots": n, "context_tokens": c, "error": "skipped: past the sweep's budget"}
                     for n, c in points]
            continue
        log = out / f"vllm-boot{k}.log"
        log.unlink(missing_ok=True)
        server = VLLMServer(scfg.model, port=free_port(), log_path=log)
        try:
            boot = round(server.start().wait_ready(), 1)
        except Exception as e:  # a boot that fails is a finding for every point of it
            boot, error = None, f"{type(e).__name__}: {e}"[:1000]
        try:
            for n, ctx in points:
                row = key | {"slots": n, "context_tokens": ctx}
                if boot is None:
                    rows.append(row | {"error": error})
                elif time.monotonic() - t0 > BUDGET_S:
                    rows.append(row | {"error": "skipped: past the sweep's budget"})
                else:
                    rows.append(row | _point(scfg, server.url, boot, games, only, minutes,
                                             out / f"boot{k}-{n}x{ctx}", n, ctx, limits, server.alive))
        finally:
            server.stop()
        scan = offline.scan(log.read_text(errors="replace")) if log.exists() else {"ok": True, "failing": []}
        for row in rows:
            if row["boot"] == name:
                row["vllm_log"] = {"failing": scan["failing"], "lines": scan.get("lines", {})}
                row["ok"] = bool(row.get("ok")) and scan["ok"]
    return _decide(cfg, out, rows, minutes, time.monotonic() - t0, planned, network)


def _decide(cfg: Any, out: Path, rows: list[dict[str, Any]], minutes: float, wall: float,
            planned: tuple[int, int], network: dict[str, Any] | None) -> dict[str, Any]:
    """`best`, `graphs` and `set` from the points (the module docstring's rules)."""
    default = [r for r in rows if r["graphs"] == "default"]
    best = max((r for r in default if r.get("ok")), key=lambda r: r["figures"]["decode_tokens_per_s"] or 0,
               default=None)

    def at_plan(graphs: str) -> dict[str, Any] | None:
        mtp = cfg.model.serve.mtp_tokens
        return next((r for r in rows if r["graphs"] == graphs and r["mtp_tokens"] == mtp
                     and (r["slots"], r["context_tokens"]) == planned), None)
    figures = {g: {"decode_tokens_per_s": (r.get("figures") or {}).get("decode_tokens_per_s"),
                   "stable": r.get("stable", False), "ok": r.get("ok", False), "error": r.get("error")}
               for g in ("default", "PIECEWISE", "eager") if (r := at_plan(g)) is not None}
    d, pw = figures.get("default", {}), figures.get("PIECEWISE", {})
    piecewise = bool(pw.get("ok")) and (not d.get("ok") or (pw["decode_tokens_per_s"] or 0) >=
                                        (1 + GRAPHS_MARGIN) * (d.get("decode_tokens_per_s") or 0))
    sets = [] if best is None else [f"scheduler.slots={best['slots']}", f"agent.context_tokens={best['context_tokens']}",
                                    f"model.serve.max_model_len={best['context_tokens']}",
                                    f"model.serve.mtp_tokens={best['mtp_tokens']}"]
    doc = {"points": rows, "minutes_per_point": minutes, "wall_s": round(wall, 1),
           "plan_kv_tokens": cfg.plan.kv_tokens, "profile": cfg.plan.profile, "network": network,
           "best": None if best is None else {k: best[k] for k in ("slots", "context_tokens", "mtp_tokens")},
           "graphs": {"at": list(planned), "figures": figures, "choice": "PIECEWISE" if piecewise else "default",
                      "margin": GRAPHS_MARGIN},
           "set": sets + (["model.serve.cudagraph_mode=PIECEWISE"] if piecewise else [])}
    (out / "sweep.json").write_text(json.dumps(doc, indent=1, default=str))
    return doc
