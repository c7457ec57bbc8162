"""`duck train check-checkpoint BASE MERGED`: a merged checkpoint checked against its base on a CPU.

Public reports of the month (FIELD §6): merges that dropped the `mtp.*` tensors their config
declares (MTP then drafts with nothing, or vLLM refuses), adapters that trained a third of
their modules, a merged checkpoint vLLM would not start without the base's config files. So:
the same tensor names, dtypes and shapes as the base, `mtp.*` included where the config
declares MTP layers; the config, tokenizer, template and processor files the base has; the
same architectures; and how many tensors the merge changed (none: the adapter did nothing).
The safetensors headers and bytes are read directly (no torch). One line per failure, exit 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import struct
from pathlib import Path
from typing import Any

from duck.train import BadData

FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "vocab.json",
         "merges.txt", "special_tokens_map.json", "chat_template.jinja", "chat_template.json",
         "preprocessor_config.json", "video_preprocessor_config.json")
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers", "mtp_num_layers")
MTP = re.compile(r"(^|\.)mtp\.")
ADAPTER = re.compile(r"lora_|base_model\.model\.|modules_to_save|original_module")


def tensors(folder: Path) -> dict[str, tuple[Path, str, list[int], int, int]]:
    """name -> (file, dtype, shape, first byte, end byte) over the folder's safetensors files."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise BadData(f"{folder}: no *.safetensors files")
    out = {}
    for f in files:
        with open(f, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise BadData(f"{f}: not a safetensors file")
            size = struct.unpack("<Q", raw)[0]
            try:
                header = json.loads(fh.read(size))
            except ValueError:
                raise BadData(f"{f}: its safetensors header is not JSON") from None
        for name, info in header.items():
            if name != "__metadata__":
                a, b = info["data_offsets"]
                out[name] = (f, info["dtype"], list(info["shape"]), 8 + size + a, 8 + size + b)
    return out


def digest(entry: tuple[Path, str, list[int], int, int]) -> str:
    f, _, _, a, b = entry
    h = hashlib.blake2b(digest_size=16)
    with open(f, "rb") as fh:
        fh.seek(a)
        left = b - a
        while left > 0:
            chunk = fh.read(min(left, 1 << 24))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def mtp_layers(config: dict[str, Any]) -> int:
    """MTP layers a config declares (its own keys or its text_config's)."""
    for c in (config, config.get("text_config") or {}):
        for k in MTP_KEYS:
            if isinstance(c.get(k), int) and c[k] > 0:
                return c[k]
    return 0


def _config(folder: Path) -> dict[str, Any]:
    f = folder / "config.json"
    if not f.is_file():
        raise BadData(f"{folder}: no config.json (not a model folder)")
    try:
        return json.loads(f.read_text())
    except ValueError:
        raise BadData(f"{f}: not JSON") from None


def _few(names: set[str] | list[str]) -> str:
    names = sorted(names)
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def compare(base: Path, merged: Path, hash_bytes: bool = True) -> tuple[list[str], dict[str, Any]]:
    """The failures (one line each) and the summary of MERGED against BASE."""
    fails: list[str] = []
    cb, cm = _config(base), _config(merged)
    if cb.get("architectures") != cm.get("architectures"):
        fails.append(f"architectures differ: {cb.get('architectures')} vs {cm.get('architectures')}")
    gone = [f for f in FILES if (base / f).is_file() and not (merged / f).is_file()]
    if gone:
        fails.append(f"files of the base missing (vLLM reads them): {', '.join(gone)}")
    tb, tm = tensors(base), tensors(merged)
    missing, extra = set(tb) - set(tm), set(tm) - set(tb)
    if missing:
        fails.append(f"{len(missing)} tensors of the base missing: {_few(missing)}")
    if extra:
        adapter = any(ADAPTER.search(n) for n in extra)
        hint = " (adapter names: was the adapter merged and unloaded?)" if adapter else ""
        fails.append(f"{len(extra)} tensors the base has not: {_few(extra)}{hint}")
    declared = max(mtp_layers(cb), mtp_layers(cm))
    mtp_base = {n for n in tb if MTP.search(n)}
    mtp_merged = {n for n in tm if MTP.search(n)}
    if declared and not mtp_merged:
        fails.append(f"the config declares {declared} MTP layer(s) and the merged checkpoint has no "
                     "mtp.* tensor")
    elif declared and not mtp_base:
        fails.append(f"the config declares {declared} MTP layer(s) and the base has no mtp.* tensor")
    shaped = [n for n in set(tb) & set(tm) if tb[n][1:3] != tm[n][1:3]]
    if shaped:
        fails.append(f"{len(shaped)} tensors of another dtype or shape: {_few(shaped)}")
    changed = [n for n in sorted(set(tb) & set(tm)) if n not in shaped and digest(tb[n]) != digest(tm[n])] \
        if hash_bytes else None
    if changed == []:
        fails.append("the merge changed no tensor (an adapter without effect?)")
    summary = {"ok": not fails, "tensors": len(tm), "base_tensors": len(tb), "missing": len(missing),
               "extra": len(extra), "mtp": {"declared_layers": declared, "tensors": len(mtp_merged),
                                            "changed": sum(1 for n in changed or [] if MTP.search(n))},
               "changed": None if changed is None else len(changed),
               "changed_examples": None if changed is None else changed[:10]}
    return fails, summary


def _main(args: argparse.Namespace) -> int:
    try:
        for p in (args.base, args.merged):
            if not Path(p).is_dir():
                raise BadData(f"{p}: " + ("not a folder" if Path(p).exists() else "no such folder"))
        fails, summary = compare(Path(args.base), Path(args.merged), not args.names_only)
    except BadData as e:
        raise SystemExit(str(e)) from None
    for line in fails:
        print(line)
    print(json.dumps(summary))
    return 1 if fails else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="check a trained checkpoint before it plays (check-checkpoint)")
    inner = p.add_subparsers(dest="train_command", required=True, metavar="SUBCOMMAND",
                             help="check-checkpoint: a merged checkpoint against its base")
    c = inner.add_parser("check-checkpoint", help="a merged checkpoint against its base: tensors (mtp.* "
                         "too), config and processor files, what the merge changed")
    c.add_argument("base", metavar="BASE", help="the base model's folder (safetensors, config.json)")
    c.add_argument("merged", metavar="MERGED", help="the merged checkpoint's folder")
    c.add_argument("--names-only", action="store_true",
                   help="skip reading the tensors' bytes (no change count)")
    c.set_defaults(func=_main)
