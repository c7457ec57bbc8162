"""What a rehearsal checks once the notebook has run: it ran without a cell error;
notebook.ipynb is in sync with notebook.py; every game the gateway lists was played (a
record with actions; a broken game recorded with its error); the scorecard was closed (the
gateway shows it); the notebook ended inside the budget; the outputs are where Kaggle
expects them; vLLM was stopped; and each fault's own effect (a model that dies, hangs or
crash-loops: marked down, restarted (a crash loop ends on the ladder's MTP-off rung), and every
game unfinished at the outage waited for it, no explorer action, then played on with the model;
the notebook waiting for a slow gateway, ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from duck.kaggle.notebook import notebook_json
from duck.paths import REPO
from duck.play.record import read_record
from devkit.rehearse.gateway import http_get, port_open
from devkit.rehearse.layout import NOTEBOOK

if TYPE_CHECKING:
    from devkit.rehearse.faults import SlowProxy
    from devkit.rehearse.gateway import Gateway


@dataclass
class Report:
    mode: str
    fault: str
    budget_s: float
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    def check(self, name: str, ok: bool, detail: Any = "") -> None:
        self.checks[name] = {"ok": bool(ok), "detail": detail}

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c["ok"] for c in self.checks.values())


def _records(working: Path) -> dict[str, Any]:
    out = {}
    for p in sorted((working / "duck" / "records").glob("*.jsonl")):
        try:
            r = read_record(p)
            out[r.game_id] = r
        except Exception as e:  # a torn record is a finding, not a crash
            out[p.stem] = e
    return out


def _handover(event: dict[str, Any]) -> bool:
    """A game handed from the model to the explorer: by the notebook's fallback policy, or
    by the agent itself when its requests keep failing (whichever notices first)."""
    return event.get("kind") == "fallback" or "takes over" in str(event.get("message", ""))


def _after_handover(record: Any) -> int:
    t = next((e.get("t", 0) for e in record.events if _handover(e)), None)
    return 0 if t is None else sum(1 for a in record.actions if a.get("t", 0) >= t)


def check_run(rep: Report, paths: dict[str, Path], run: dict[str, Any], listed: list[str],
              gateway: "Gateway | None", model_url: str, policy: str | None = None) -> None:
    """Every check of a rehearsal once the notebook has run (the module docstring). `policy`:
    the record name of the user's policy the notebook was given (duck rehearse --policy)."""
    working = paths["working"]
    rep.check("notebook_ran", run["error"] is None, run["error"] or f"{run['seconds']} s")
    rep.check("notebook_in_sync", NOTEBOOK.read_text() == notebook_json(REPO / "notebook.py"),
              "notebook.ipynb == make notebook output")
    summary_path = working / "duck" / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    rep.facts["summary"] = {k: summary.get(k) for k in ("mode", "runner", "model", "scorecard", "errors")}
    rep.facts["steps"] = {s["name"]: (s["seconds"], s["ok"]) for s in summary.get("steps", [])}
    rep.check("mode", summary.get("mode") == rep.mode, summary.get("mode"))
    records = _records(working)
    expected_broken = {g for g in listed if g.startswith(("zx01", "zr01"))} if rep.fault == "game-raises" else set()
    missing = _check_games(rep, working, listed, records, summary, expected_broken)
    _check_card(rep, gateway, summary, listed, expected_broken)
    # Inside the budget: the whole notebook (kernel start included), and its own clock.
    own = (summary.get("ended_at") or 0) - (summary.get("started_at") or 0)
    rep.check("inside_budget", run["seconds"] <= rep.budget_s and 0 < own <= rep.budget_s,
              {"notebook_s": run["seconds"], "own_clock_s": round(own, 1), "budget_s": rep.budget_s})
    _check_outputs(rep, working, summary_path.exists(), len(records), len(listed))
    _check_model(rep, summary.get("model") or {}, model_url, missing, policy)
    if rep.fault in ("model-dies", "model-hangs", "crash-loop"):
        _check_parked(rep, summary, records)
    if policy is not None:  # every game played by the user's policy, which nothing refused
        names = {g: r.header.get("policy") for g, r in records.items() if not isinstance(r, Exception)}
        rep.check("user_policy_played", bool(names) and set(names.values()) == {policy}
                  and not any(e.startswith("policy") for e in summary.get("errors") or []),
                  {"expected": policy, "records": names, "errors": summary.get("errors")})


def _check_games(rep: Report, working: Path, listed: list[str], records: dict[str, Any],
                 summary: dict[str, Any], expected_broken: set[str]) -> list[str]:
    """Every listed game played: a record with actions, or its failure recorded. Returns the missing."""
    played, missing, errored = [], [], {}
    for g in listed:
        r = records.get(g)
        if r is None or isinstance(r, Exception):
            missing.append(g)
            continue
        errs = [e["message"] for e in r.events if e.get("kind") == "error"]
        if errs or (r.end or {}).get("reason") == "error":
            errored[g] = (errs or ["error"])[-1][:200]
        if r.actions:
            played.append(g)
        elif g not in expected_broken:
            missing.append(g)
    rep.facts["games"] = {g: {"actions": len(r.actions), "levels": (r.end or {}).get("levels"),
                              "end": (r.end or {}).get("reason"),
                              "fallbacks": [e["message"][:120] for e in r.events if _handover(e)],
                              "actions_after_handover": _after_handover(r)}
                          for g, r in records.items() if not isinstance(r, Exception)}
    rep.check("games_listed", bool(listed) and summary.get("games") == listed,
              {"gateway": listed, "notebook": summary.get("games")})
    rep.check("every_game_played", not missing, {"played": played, "missing": missing, "errors": errored})
    if rep.fault == "game-raises":
        # Each failure is visible: in the game's record, or in the run's log (a game that
        # raises mid-play is reported to the model by the kernel, and logged).
        log_text = (working / "duck" / "run.log").read_text() if (working / "duck" / "run.log").exists() else ""
        seen = {g: errored.get(g) or next((ln[:240] for ln in log_text.splitlines()
                                           if "ERROR" in ln and g in ln), None) for g in expected_broken}
        rep.check("broken_games_recorded", len(expected_broken) == 2 and all(seen.values()), seen)
        rep.check("other_games_unharmed", all(g in played for g in listed if g not in expected_broken),
                  played)
    return missing


def _check_card(rep: Report, gateway: "Gateway | None", summary: dict[str, Any], listed: list[str],
                expected_broken: set[str]) -> None:
    """The scorecard: closed by the notebook, and the gateway agrees (403 while open)."""
    card = (summary.get("scorecard") or {}).get("card_id")
    closed = (summary.get("scorecard") or {}).get("closed") is True
    if gateway is None:
        rep.check("scorecard_closed", closed, {"card": card})
        return
    status = http_get(f"{gateway.url}/api/scorecard/{card}")[0] if card else 0
    doc = gateway.closed_card() or {}
    envs = {}
    for e in doc.get("environments") or []:
        for r in e.get("runs") or [e]:
            envs[r.get("id") or e.get("id")] = {"actions": r.get("actions"),
                                                "levels": r.get("levels_completed")}
    rep.facts["gateway_scorecard"] = {"closed": bool(doc), "card_id": doc.get("card_id"),
                                      "after_close_status": status, "environments": envs}
    # Open, the gateway answers 403 for the card; closed, it has dropped it (404) and
    # its close hook (the one Kaggle's gateway writes the submission from) has fired.
    rep.check("scorecard_closed", closed and doc.get("card_id") == card and status == 404,
              {"notebook": closed, "gateway_close_hook": doc.get("card_id"), "card": card,
               "gateway_status_after": status})
    on_card = [g for g in listed if g not in expected_broken and (envs.get(g) or {}).get("actions")]
    rep.check("gateway_saw_every_game", set(on_card) == set(listed) - expected_broken,
              {"with_actions": on_card})


def _check_outputs(rep: Report, working: Path, summary_written: bool, records: int, listed: int) -> None:
    """Outputs where Kaggle expects them."""
    sub = working / "submission.parquet"
    outputs: dict[str, Any] = {"summary.json": summary_written,
                               "run.log": (working / "duck" / "run.log").exists(),
                               "records": records,  # and conversations (a fault may have none)
                               "conversations": len(list((working / "duck" / "conversations").glob("*.jsonl*")))}
    if rep.mode == "interactive":
        cols = None
        if sub.exists():
            import pyarrow.parquet as pq  # here: pyarrow comes with the test extra only
            cols = pq.read_table(sub).column_names
        outputs["submission.parquet columns"] = cols
        outputs["score.json"] = (working / "duck" / "score.json").exists()
        ok = cols == ["row_id", "game_id", "end_of_game", "score"] and outputs["score.json"]
    else:
        outputs["submission.parquet (the gateway writes it; we must not)"] = sub.exists()
        ok = not sub.exists()
    rep.check("outputs_in_place", ok and summary_written and outputs["run.log"] and records >= listed,
              outputs)


def _check_model(rep: Report, model: dict[str, Any], model_url: str, missing: list[str],
                 policy: str | None) -> None:
    """vLLM torn down, and each fault's own effect (a user's policy starts none)."""
    rep.check("model_server_stopped", not port_open(model_url), model.get("status"))
    if policy is not None:
        rep.check("no_model_started", str(model.get("status", "")).startswith("off (play.policy"),
                  model.get("status"))
    elif rep.fault in ("model-dies", "model-hangs", "crash-loop"):
        down, boots = model.get("down") or [], model.get("boots") or []
        rep.check("model_marked_down", bool(down), down)
        rep.check("model_restarted", len(boots) >= 2 and bool(model.get("restarted_at_s")) and not missing
                  and boots[-1].get("ready_s") is not None,
                  [{k: b.get(k) for k in ("rung", "end", "ready_s", "uptime_s", "cause")} for b in boots])
        if rep.fault == "crash-loop":  # MTP's boots crashed; the run ends on the MTP-off rung
            rep.check("ended_on_the_mtp_off_rung", boots[-1:] and boots[-1]["settings"]["mtp_tokens"] == 0
                      and boots[-1]["rung"] == 1 and all(b["end"] == "crashed" and b["settings"]["mtp_tokens"]
                                                         for b in boots[:-1]),
                      [(b["rung"], b["settings"]["mtp_tokens"], b["end"]) for b in boots])
    elif rep.fault == "no-model":
        rep.check("model_never_up", model.get("status", "").startswith("did not come up"),
                  model.get("status"))
    elif rep.fault == "none":
        rep.check("model_was_ready", model.get("status") == "ready", model.get("status"))


def _check_parked(rep: Report, summary: dict[str, Any], records: dict[str, Any]) -> None:
    """Every game unfinished at the (first) outage waited for the server: no explorer action
    (no handover at all), and model actions after the server was back."""
    model = summary.get("model") or {}
    t0 = summary.get("started_at") or 0.0
    down = (model.get("down") or [{}])[0].get("at_s")
    back = (model.get("restarted_at_s") or [None])[0]
    waited: dict[str, Any] = {}
    for g, r in records.items():
        if isinstance(r, Exception) or down is None:
            continue
        start = _epoch(r.header.get("started"))
        if start is None or start + float((r.end or {}).get("t", 1e9)) < t0 + down - 1:
            continue  # over before the outage
        after = sum(1 for a in r.actions if back is not None and start + a.get("t", 0) > t0 + back)
        waited[g] = {"handovers": sum(1 for e in r.events if _handover(e)),
                     "model_actions_after_restart": after,
                     "parked": sum(1 for e in r.events if e.get("kind") == "parked")}
    rep.check("games_waited_for_the_server", bool(waited) and back is not None
              and all(v["handovers"] == 0 and v["model_actions_after_restart"] > 0 for v in waited.values()),
              {"outage_at_s": down, "back_at_s": back, "games": waited})


def _epoch(iso: str | None) -> float | None:
    """A record header's `started` (UTC, to the second) as seconds since the epoch."""
    try:
        return datetime.fromisoformat(iso or "").timestamp()
    except ValueError:
        return None


def check_waited(rep: Report, paths: dict[str, Path], proxy: SlowProxy) -> None:
    """gateway-slow: the notebook asked for the games before the gateway listened, waited,
    and every request still went through the slow gateway."""
    summary = json.loads((paths["working"] / "duck" / "summary.json").read_text())
    step = next((s for s in summary.get("steps", []) if s["name"] == "open_games"), None)
    asked_at = summary["started_at"] + step["started"] if step else None
    rep.facts["gateway_proxy"] = {"start_delay_s": proxy.start_delay_s, "delay_s": proxy.delay_s,
                                  "requests": proxy.requests, "listening_at": proxy.listening_at,
                                  "notebook_asked_at": asked_at, "waited_s": step and step["seconds"]}
    rep.check("waited_for_gateway", bool(step and step["ok"] and proxy.listening_at and asked_at
                                         and asked_at < proxy.listening_at and proxy.requests > 0),
              rep.facts["gateway_proxy"])
