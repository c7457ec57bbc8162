"""The page of the step-through player (duck.lab.report.player): one HTML file, its style and
script inline, its data one JSON block; it reads nothing at run time, so it works opened
from the run folder (file://) and in the Kaggle output viewer.

What it shows: a game selector; the board on a canvas (the click of a CLICK action outlined);
the step (action, levels, state, time, animation frame k of n), why the action was chosen,
the record's events after it, and for a model's game the turn's code and output; buttons to
each level's start, each GAME_OVER and the win. Keys: ← → one action, , . one animation frame,
PageUp PageDown ten actions, Home End, n p the next or previous level start, g the next
GAME_OVER, w the win, space plays. The address keeps the place (`#game=ID&step=N&frame=K`):
a link, or a reload, opens the same board.
"""

from __future__ import annotations

import json
from typing import Any

from duck.lab.report.blocks import esc

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:1em;color:#222}
h1{font-size:1.3em;margin:.2em 0 .5em}.muted{color:#777;font-size:.85em}
#main{display:flex;gap:1.2em;align-items:flex-start;flex-wrap:wrap}
#board{border:1px solid #999;image-rendering:pixelated;background:#000}
#left{flex:0 0 auto;width:520px}
#controls{margin:.4em 0;display:flex;gap:.3em;align-items:center;flex-wrap:wrap}
#controls button{font-size:1em;min-width:2.2em}#slider{flex:1;min-width:120px}
#marks button{font-size:.78em;margin:.1em}#marks button.over{color:#b00}#marks button.win{color:#070}
#marks button.here{font-weight:bold;outline:2px solid #1E93FF}
#right{flex:1;min-width:340px;max-width:760px}
#step{font-size:1.05em;margin-bottom:.4em}#step b{font-family:ui-monospace,Menlo,monospace}
#why{background:#f4f8ff;padding:.4em;border-left:3px solid #1E93FF;font-size:.9em;min-height:1.2em}
#events div{font-size:.85em;color:#805000;margin:.2em 0}
pre{background:#f7f7f7;padding:.5em;white-space:pre-wrap;font-size:.78em;max-height:22em;overflow:auto}
pre#code{background:#272822;color:#f8f8f2}
select{font-size:1em;max-width:32em}
"""

SCRIPT = r"""
"use strict";
const D = JSON.parse(document.getElementById("duck-player").textContent);
const PAL = D.palette.map(h => [1, 3, 5].map(i => parseInt(h.slice(i, i + 2), 16)));
const $ = id => document.getElementById(id);
const KEY = 32, SCALE = 8;
let G = null, S = 0, F = -1, timer = null, cache = null;

function prepare(g) {
  if (g._ready || !g.n) return;
  const bin = atob(g.boards), data = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) data[i] = bin.charCodeAt(i);
  g._data = data; g._off = new Uint32Array(g.n); g._key = []; g._b = [0];
  const board = new Uint8Array(g.h * g.w);
  let pos = 0;
  for (let k = 0; k < g.n; k++) {
    g._off[k] = pos;
    pos = apply(g, board, k);
    if (k % KEY === 0) g._key.push(board.slice());
  }
  for (let s = 1; s < g.a.length; s++) g._b.push(g._b[s - 1] + g.nf[s] + 1);
  g._ready = true;
}

function apply(g, board, k) {
  const data = g._data;
  let pos = g._off[k];
  const vi = () => { let v = 0, m = 1, b; do { b = data[pos++]; v += (b & 127) * m; m *= 128; } while (b >= 128); return v; };
  const runs = vi();
  let cell = 0;
  for (let r = 0; r < runs; r++) {
    cell += vi();
    const len = vi();
    for (let i = 0; i < len; i++) { const byte = data[pos + (i >> 1)]; board[cell + i] = (i & 1) ? (byte & 15) : (byte >> 4); }
    pos += (len + 1) >> 1;
    cell += len;
  }
  return pos;
}

function boardAt(g, j) {
  const base = Math.floor(j / KEY) * KEY;
  if (!(cache && cache.g === g && cache.j <= j && cache.j >= base)) cache = {g: g, j: base, b: g._key[base / KEY].slice()};
  for (let k = cache.j + 1; k <= j; k++) apply(g, cache.b, k);
  cache.j = j;
  return cache.b;
}

function draw(g, board, click) {
  const c = $("board"), ctx = c.getContext("2d");
  c.width = g.w * SCALE; c.height = g.h * SCALE;
  const img = ctx.createImageData(g.w, g.h);
  for (let i = 0; i < board.length; i++) {
    const p = PAL[board[i] & 15];
    img.data[4 * i] = p[0]; img.data[4 * i + 1] = p[1]; img.data[4 * i + 2] = p[2]; img.data[4 * i + 3] = 255;
  }
  const off = document.createElement("canvas");
  off.width = g.w; off.height = g.h;
  off.getContext("2d").putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(off, 0, 0, c.width, c.height);
  if (click) {
    ctx.strokeStyle = "#1E93FF"; ctx.lineWidth = 2;
    ctx.strokeRect(click[0] * SCALE - 3, click[1] * SCALE - 3, SCALE + 6, SCALE + 6);
    ctx.strokeStyle = "#fff"; ctx.lineWidth = 1;
    ctx.strokeRect(click[0] * SCALE - 5, click[1] * SCALE - 5, SCALE + 10, SCALE + 10);
  }
}

const STATE = {N: "NOT_FINISHED", W: "WIN", G: "GAME_OVER"};

function text(id, value) { $(id).textContent = value; }

function show() {
  const g = G;
  if (!g.n) { text("step", g.error || "no board recorded"); return; }
  S = Math.max(0, Math.min(S, g.a.length - 1));
  const nf = g.nf[S], f = (F < 0 || F > nf) ? nf : F;
  const m = /^CLICK (\d+) (\d+)$/.exec(g.a[S]);
  draw(g, boardAt(g, g._b[S] - nf + f), m ? [+m[1], +m[2]] : null);
  const anim = g.fr[S] > 1 ? (nf ? ` · frame ${f + 1}/${nf + 1}` : ` · ${g.fr[S]} frames (not recorded)`) : "";
  $("step").innerHTML = "";
  const parts = [["step ", `${S} / ${g.a.length - 1}`], [" · ", g.a[S]], [" · level ", String(g.lv[S] + 1)],
                 [" (", `${g.lv[S]}/${g.levels_total} done)`], [" · ", STATE[g.st[S]]], [" · t ", `${g.t[S]} s`], ["", anim]];
  for (const [label, value] of parts) {
    $("step").append(label);
    const b = document.createElement("b"); b.textContent = value; $("step").append(b);
  }
  const why = g.rt[g.r[S]];
  text("why", S === 0 ? "the first board" : (why || "no reason recorded (the explorer records its reasons with explorer.trace=true; a UserPolicy sets self.reason)"));
  $("events").innerHTML = "";
  for (const e of (g.ev[String(S)] || [])) { const d = document.createElement("div"); d.textContent = e; $("events").append(d); }
  const t = g.tn[S] >= 0 ? g.turns[String(g.tn[S])] : null;
  $("turn").style.display = t ? "" : "none";
  if (t) { text("turnhead", `model turn ${g.tn[S]} (level ${t.lvl}) ${t.outcome || ""}`); text("code", t.code || "(no code)"); text("out", t.out || "(no output)"); }
  $("slider").value = S;
  let here = -1;
  g.marks.forEach((mk, i) => { if (mk.s <= S && mk.kind === "level") here = i; });
  document.querySelectorAll("#marks button").forEach((b, i) => b.classList.toggle("here", i === here));
  try { history.replaceState(null, "", `#game=${encodeURIComponent(g.id)}&step=${S}&frame=${F < 0 ? "" : f}`); } catch (e) { /* a viewer may forbid it */ }
}

function go(s, f) { S = s; F = f === undefined ? -1 : f; show(); }
function frame(d) {
  const nf = G.nf[S], f = (F < 0 || F > nf) ? nf : F;
  if (d > 0) { if (f < nf) go(S, f + 1); else if (S + 1 < G.a.length) go(S + 1, 0); }
  else if (f > 0) go(S, f - 1); else if (S > 0) go(S - 1, G.nf[S - 1]);
}
function jump(kind, dir) {
  const ms = G.marks.filter(m => m.kind === kind).map(m => m.s);
  const t = dir > 0 ? ms.find(s => s > S) : ms.reverse().find(s => s < S);
  if (t !== undefined) go(t); else if (ms.length && kind !== "level") go(ms[0]);
}
function play() {
  if (timer) { clearInterval(timer); timer = null; text("play", "▶ play"); return; }
  text("play", "❚❚ pause");
  timer = setInterval(() => { if (S + 1 >= G.a.length && (F < 0 || F >= G.nf[S])) play(); else frame(1); }, 90);
}

function choose(i, step, f) {
  G = D.games[i]; cache = null; prepare(G);
  $("game").value = String(i);
  text("gameinfo", `policy ${G.policy} · seed ${G.seed} · pass ${G.pass} · score ${G.score} · ${G.a ? G.a.length - 1 : 0} actions · ${G.title}`);
  $("gif").href = G.gif || ""; $("gif").style.display = G.gif ? "" : "none";
  $("slider").max = G.a ? G.a.length - 1 : 0;
  $("marks").innerHTML = "";
  (G.marks || []).forEach(mk => {
    const b = document.createElement("button"); b.textContent = `${mk.label} (${mk.s})`; b.className = mk.kind;
    b.onclick = () => go(mk.s); $("marks").append(b);
  });
  go(step || 0, f === undefined ? -1 : f);
}

D.games.forEach((g, i) => {
  const o = document.createElement("option"); o.value = String(i);
  o.textContent = `${g.id} · score ${g.score} · ${g.a ? g.a.length - 1 : 0} actions`; $("game").append(o);
});
$("game").onchange = () => choose(+$("game").value);
$("slider").oninput = () => go(+$("slider").value);
$("first").onclick = () => go(0); $("last").onclick = () => go(G.a.length - 1);
$("prev").onclick = () => go(S - 1); $("next").onclick = () => go(S + 1);
$("pframe").onclick = () => frame(-1); $("nframe").onclick = () => frame(1);
$("play").onclick = play;
document.addEventListener("keydown", e => {
  if (e.target.tagName === "SELECT") return;
  if (e.target.tagName === "INPUT") e.target.blur();
  const k = {ArrowRight: () => go(S + 1), ArrowLeft: () => go(S - 1), ".": () => frame(1), ",": () => frame(-1),
             PageDown: () => go(S + 10), PageUp: () => go(S - 10), Home: () => go(0), End: () => go(G.a.length - 1),
             n: () => jump("level", 1), p: () => jump("level", -1), g: () => jump("over", 1), w: () => jump("win", 1),
             " ": play}[e.key];
  if (k) { e.preventDefault(); k(); }
});
const h = new URLSearchParams(location.hash.slice(1));
const gi = Math.max(0, D.games.findIndex(g => g.id === h.get("game")));
if (D.games.length) choose(gi, +(h.get("step") || 0), h.get("frame") ? +h.get("frame") : undefined);
"""


def player_html(data: dict[str, Any]) -> str:
    """The page for `duck.lab.report.player.player_data(...)`."""
    # Every `<` escaped (JSON's \u003c): in a script element `</script` ends it and `<!--` followed
    # by `<script` makes the parser swallow the next script (issue 48: one string from model output
    # broke the page for every game); with no `<` left the block ends only at its own `</script>`.
    blob = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    run = esc(data.get("run", ""))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>duck player: {run}</title><style>{CSS}</style></head>
<body>
<h1>Player: {run} <span class=muted>(<a href="report.html">report</a>)</span></h1>
<div><label>game <select id=game></select></label> <span id=gameinfo class=muted></span>
<a id=gif title="this game as an animated GIF, to share (duck gif)">GIF</a></div>
<noscript><p>The player needs JavaScript; report.html shows each level's first and last frame without it.</p></noscript>
<div id=main>
<div id=left><canvas id=board width=512 height=512></canvas>
<div id=controls><button id=first title="first step (Home)">«</button><button id=prev title="previous action (←)">◀</button>
<button id=pframe title="previous animation frame (,)">‹</button><button id=nframe title="next animation frame (.)">›</button>
<button id=next title="next action (→)">▶</button><button id=last title="last step (End)">»</button>
<button id=play title="play / pause (space)">▶ play</button><input type=range id=slider min=0 max=0 value=0></div>
<div id=marks></div>
<p class=muted>keys: ← → action · , . animation frame · PageUp PageDown 10 actions · Home End · n p level start ·
g GAME_OVER · w win · space play</p></div>
<div id=right><div id=step></div><div id=why></div><div id=events></div>
<div id=turn style="display:none"><h3 id=turnhead></h3><pre id=code></pre><pre id=out></pre></div></div>
</div>
<script type="application/json" id="duck-player">{blob}</script>
<script>{SCRIPT}</script>
</body></html>
"""
