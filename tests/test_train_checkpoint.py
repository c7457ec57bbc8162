"""`duck train check-checkpoint BASE MERGED` on small synthetic checkpoints written here in the
safetensors format (its header and bytes, by hand: no torch): a good merge passes, and each
failure the field reported this month (FIELD §6) is one line, exit 1."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from train_runs import duck

CONFIG = {"architectures": ["Qwen4ExpForConditionalGeneration"], "model_type": "qwen4_exp",
          "text_config": {"num_hidden_layers": 2, "mtp_num_hidden_layers": 1}}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def model(folder: Path, tensors: dict[str, np.ndarray], shards: int = 1, files: tuple[str, ...] = (
        "config.json", "tokenizer.json", "chat_template.jinja", "preprocessor_config.json")) -> Path:
    folder.mkdir(parents=True)
    for f in files:
        (folder / f).write_text(json.dumps(CONFIG) if f == "config.json" else "{}")
    names = list(tensors)
    weight_map = {}
    for k in range(shards):
        part = names[k::shards]
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(folder / fname, {n: tensors[n] for n in part})
        weight_map |= {n: fname for n in part}
    if shards > 1:
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


@pytest.fixture
def base(tmp_path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    names = ["model.language_model.embed_tokens.weight",
             "model.language_model.layers.0.self_attn.q_proj.weight",
             "model.language_model.layers.0.mlp.experts.gate_up_proj", "lm_head.weight", "mtp.fc.weight",
             "mtp.layers.0.mlp.experts.down_proj", "model.visual.blocks.0.attn.qkv.weight"]
    return {n: rng.standard_normal((2, 4, 3) if "experts" in n else (4, 3)).astype(np.float32)
            for n in names}


def _merged(base: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = dict(base)
    for n in ("model.language_model.layers.0.self_attn.q_proj.weight",
              "model.language_model.layers.0.mlp.experts.gate_up_proj"):
        out[n] = base[n] + 0.01
    return out


def _check(capsys, tmp_path, merged: Path, *more: str) -> tuple[int, list[str], dict]:
    code, out, err = duck(capsys, "train", "check-checkpoint", str(tmp_path / "base"), str(merged), *more)
    lines = out.strip().splitlines()
    return code, lines[:-1], json.loads(lines[-1]) if lines else err


def test_a_good_merge_passes_and_says_what_it_changed(base, tmp_path, capsys):
    model(tmp_path / "base", base)
    merged = model(tmp_path / "merged", _merged(base), shards=2)  # sharded differently: names count
    code, fails, summary = _check(capsys, tmp_path, merged)
    assert code == 0 and fails == [] and summary["changed"] == 2 and summary["mtp"] == {
        "declared_layers": 1, "tensors": 2, "changed": 0}
    code, fails, summary = _check(capsys, tmp_path, merged, "--names-only")
    assert code == 0 and summary["changed"] is None


def test_each_failure_the_field_reported_is_one_line(base, tmp_path, capsys):
    model(tmp_path / "base", base)
    no_mtp = model(tmp_path / "no_mtp", {n: a for n, a in _merged(base).items() if not n.startswith("mtp.")})
    code, fails, _ = _check(capsys, tmp_path, no_mtp)
    assert code == 1 and len(fails) == 2
    assert "2 tensors of the base missing: mtp.fc.weight, mtp.layers.0.mlp.experts.down_proj" in fails[0]
    assert "declares 1 MTP layer(s) and the merged checkpoint has no mtp.* tensor" in fails[1]
    adapter = _merged(base) | {"base_model.model.lm_head.lora_A.weight": np.zeros((2, 3), np.float32)}
    code, fails, _ = _check(capsys, tmp_path, model(tmp_path / "adapter", adapter))
    assert code == 1 and fails == ["1 tensors the base has not: base_model.model.lm_head.lora_A.weight "
                                   "(adapter names: was the adapter merged and unloaded?)"]
    bare = model(tmp_path / "bare", _merged(base), files=("config.json",))
    code, fails, _ = _check(capsys, tmp_path, bare)
    assert fails == ["files of the base missing (vLLM reads them): tokenizer.json, chat_template.jinja, "
                     "preprocessor_config.json"]
    code, fails, _ = _check(capsys, tmp_path, model(tmp_path / "same", base))
    assert code == 1 and fails == ["the merge changed no tensor (an adapter without effect?)"]
    reshaped = _merged(base) | {"lm_head.weight": np.zeros((3, 4), np.float32)}
    code, fails, _ = _check(capsys, tmp_path, model(tmp_path / "reshaped", reshaped))
    assert fails == ["1 tensors of another dtype or shape: lm_head.weight"]


def test_bad_input_is_one_line_exit_2(base, tmp_path, capsys):
    model(tmp_path / "base", base)
    check = ("train", "check-checkpoint", str(tmp_path / "base"))
    code, _, err = duck(capsys, *check, str(tmp_path / "nowhere"))
    assert code == 2 and "no such folder" in err and len(err.strip().splitlines()) == 1
    shutil.copytree(tmp_path / "base", tmp_path / "noconfig")
    (tmp_path / "noconfig" / "config.json").unlink()
    code, _, err = duck(capsys, *check, str(tmp_path / "noconfig"))
    assert code == 2 and "no config.json" in err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{}")
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"\x05")
    code, _, err = duck(capsys, *check, str(tmp_path / "broken"))
    assert code == 2 and "not a safetensors file" in err
