"""MTP only with a trained drafter: what the checkpoint folder says before `vllm serve` starts.

vLLM loads the MTP drafter from the checkpoint's own `mtp.*` tensors and, for quantized
checkpoints, skips its missing-weights check: a build without them drafts with an untrained
head and says nothing (issue 35: one NVFP4 build's acceptance collapsed to ~1.5). So a profile
with MTP is served with MTP only when the folder's `model.safetensors.index.json` maps tensors
named `mtp.*` or `*.mtp.*`; otherwise without (the memory plan made anew), with a warning. A
model path that is not a local folder keeps MTP, unchecked.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from duck.config import with_values

log = logging.getLogger(__name__)

INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class MtpCheck:
    """What the checkpoint says of a config's MTP: `line` for the operator (None when the
    config has MTP off), `off` when it must be served without."""

    line: str | None
    off: bool = False


def mtp_tensors(model_path: str | Path) -> int | None:
    """How many of the index's tensors are the MTP head's (0: none); None without a readable index."""
    try:
        weights = json.loads((Path(model_path) / INDEX).read_text())["weight_map"]
        return sum(1 for k in weights if k.startswith("mtp.") or ".mtp." in k)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def check_mtp(serve: Any) -> MtpCheck:
    """The check for a ServeConfig (module docstring)."""
    if not serve.mtp_tokens:
        return MtpCheck(None)
    folder = Path(serve.model_path)
    if not folder.is_dir():
        return MtpCheck(f"MTP {serve.mtp_tokens}: not checked ({serve.model_path} is not a local folder)")
    n = mtp_tensors(folder)
    if n:
        return MtpCheck(f"MTP {serve.mtp_tokens}: the checkpoint's {INDEX} maps {n} mtp. tensors (the drafter)")
    what = f"no readable {INDEX}" if n is None else f"no mtp. tensors in its {INDEX}"
    return MtpCheck(f"MTP off: {folder} has {what}, so vLLM would draft with an untrained head; "
                    f"served without MTP (model.serve.mtp_tokens {serve.mtp_tokens} -> 0)", off=True)


def served(serve: Any) -> tuple[Any, MtpCheck]:
    """A ServeConfig as it may be served (a copy with MTP off where the check says so, with a
    warning), and the check."""
    check = check_mtp(serve)
    if check.off:
        log.warning("%s", check.line)
        serve = serve.model_copy(update={"mtp_tokens": 0})
    return serve, check


def served_config(cfg: Any) -> tuple[Any, MtpCheck]:
    """`served` for a whole duck.config.Config: its memory plan made anew when MTP goes off."""
    serve, check = served(cfg.model.serve)
    return (with_values(cfg, {"model.serve.mtp_tokens": 0}) if check.off else cfg), check
