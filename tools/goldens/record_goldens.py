#!/usr/bin/env python3
"""Record HF transformers reference outputs (goldens) for a Qwen3.5 checkpoint.

Command (from the repository root):
    python3 tools/goldens/record_goldens.py --model DIR --out DIR \
        [--prompt-lengths 1,7,33,100] [--greedy-tokens 32] [--seed 1234] [--threads 1]

What it writes into --out (the C++ tests read these; the layout is fixed):
  logits_{i}.npy      float32 [n_tokens, vocab]: one forward over prompt i, computed in fp32 on the
                      CPU from the bf16 weights (load bf16, then `.float()`: the fp32 weights are
                      exactly the stored bf16 values).
  mtp_logits_{i}.npy  float32 [T-1, vocab], only when the checkpoint has `mtp.*` tensors:
                      teacher-forced MTP logits over sequence = prompt + greedy continuation (T ids);
                      row t predicts token t+2 from (h_t, x_{t+1}) at position t
                      (tools/qwen35_mtp.py, ../shared/reference section 2).
  goldens.json        {"model", "command", "versions", "prompts": [{"ids", "logits", "greedy",
                      "mtp_sequence", "mtp_logits", "top2_margin_min", ...}]}.
Prompt ids are uniform in [0, vocab) from numpy's default_rng(seed), drawn in order of
--prompt-lengths; no special ids. The greedy continuation is a full-recompute argmax loop in fp32
(the definition), checked against `generate(do_sample=False)` (cached decode path) token for token.
All .npy files are NumPy format 1.0, little-endian '<f4', C order (np.save).

It does not handle MoE checkpoints (qwen3_5_moe) or multimodal inputs.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from safetensors import safe_open
from transformers import Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration

# tools/ holds the lead's MTP reference module.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from qwen35_mtp import Qwen35MTP, language_model_of, teacher_forced_mtp_logits  # noqa: E402

# Which HF class builds each layout, keyed by config.json's model_type.
MODEL_CLASSES = {
    "qwen3_5_text": Qwen3_5ForCausalLM,  # model.layers.*
    "qwen3_5": Qwen3_5ForConditionalGeneration,  # VL wrapper, model.language_model.*
}


def load_reference_model(model_dir: Path):
    """The checkpoint as HF loads it in bf16, then upcast: fp32 weights equal to the bf16 values.

    Attention is 'eager' (plain matmul + softmax) so the reference does not depend on a backend.
    """
    model_type = json.loads((model_dir / "config.json").read_text())["model_type"]
    if model_type not in MODEL_CLASSES:
        raise SystemExit(f"record_goldens: unsupported model_type '{model_type}' "
                         f"(expected one of {sorted(MODEL_CLASSES)})")
    model = MODEL_CLASSES[model_type].from_pretrained(
        model_dir, dtype=torch.bfloat16, attn_implementation="eager")
    model = model.float().eval()
    # RoPE inv_freq is a non-persistent buffer; rebuild it in fp32 from the config so it never
    # carries a bf16 rounding (a bf16 round trip changes theta^(-2i/rd) in the 3rd digit).
    lm = language_model_of(model)
    lm.rotary_emb = type(lm.rotary_emb)(model.config.get_text_config())
    return model


def checkpoint_tensor_files(model_dir: Path) -> list[Path]:
    """The safetensors files of a single-file or sharded checkpoint."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [model_dir / s for s in shards]
    return [model_dir / "model.safetensors"]


def load_mtp(model_dir: Path, model) -> Qwen35MTP | None:
    """Qwen35MTP holding the checkpoint's top-level `mtp.*` tensors (fp32), or None if absent."""
    tensors = {}
    for path in checkpoint_tensor_files(model_dir):
        with safe_open(path, framework="pt") as f:
            for name in f.keys():
                if name.startswith("mtp."):
                    tensors[name[len("mtp."):]] = f.get_tensor(name)
    if not tensors:
        return None
    mtp = Qwen35MTP(model.config)
    mtp.load_state_dict(tensors, strict=True)  # every one of the 15 dense-MTP tensors, no extras
    return mtp.float().eval()


def top2_margins(logits: torch.Tensor) -> torch.Tensor:
    """[n, V] -> [n]: top-1 minus top-2 logit per row."""
    top = logits.topk(2, dim=-1).values
    return top[:, 0] - top[:, 1]


@torch.no_grad()
def greedy_full_recompute(model, prompt: list[int], n_tokens: int) -> tuple[list[int], float]:
    """Argmax loop that re-runs the whole sequence each step (no cache): the greedy definition.
    Returns the new tokens and the smallest top-2 margin among the chosen steps."""
    ids = list(prompt)
    margin_min = float("inf")
    for _ in range(n_tokens):
        last = model(input_ids=torch.tensor([ids])).logits[0, -1:]  # [1, V]
        margin_min = min(margin_min, top2_margins(last).item())
        ids.append(int(last[0].argmax()))
    return ids[len(prompt):], margin_min


@torch.no_grad()
def greedy_generate(model, prompt: list[int], n_tokens: int) -> list[int]:
    """transformers' own greedy decode (prefill + cached token-by-token decode)."""
    input_ids = torch.tensor([prompt])
    out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                         do_sample=False, max_new_tokens=n_tokens, min_new_tokens=n_tokens,
                         eos_token_id=None, pad_token_id=0, use_cache=True)
    return out[0, len(prompt):].tolist()


def save_npy(path: Path, array: torch.Tensor) -> None:
    a = np.ascontiguousarray(array.detach().cpu().numpy().astype("<f4"))
    np.save(path, a)  # NumPy format 1.0, '<f4', fortran_order False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, type=Path, help="checkpoint directory")
    parser.add_argument("--out", required=True, type=Path, help="output directory for goldens")
    parser.add_argument("--prompt-lengths", default="1,7,33,100",
                        help="comma-separated prompt lengths (one prompt each)")
    parser.add_argument("--greedy-tokens", type=int, default=32, help="greedy continuation length")
    parser.add_argument("--seed", type=int, default=1234, help="seed for the prompt ids")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1 keeps fp32 reductions reproducible)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    lengths = [int(x) for x in args.prompt_lengths.split(",") if x]
    model = load_reference_model(args.model)
    mtp = load_mtp(args.model, model)
    vocab = model.config.get_text_config().vocab_size
    rng = np.random.default_rng(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)

    prompts = []
    for i, length in enumerate(lengths):
        ids = rng.integers(0, vocab, size=length).tolist()
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0]  # [n_tokens, V]
        save_npy(args.out / f"logits_{i}.npy", logits)
        std_min = logits.std(dim=-1).min().item()
        assert std_min > 0.1, f"prompt {i}: logits nearly flat (min std over vocab {std_min:.4g})"

        greedy, greedy_margin_min = greedy_full_recompute(model, ids, args.greedy_tokens)
        generated = greedy_generate(model, ids, args.greedy_tokens)
        assert generated == greedy, (
            f"prompt {i}: generate(do_sample=False) {generated} != full-recompute greedy {greedy} "
            f"(smallest top-2 margin {greedy_margin_min:.3g})")

        entry = {
            "ids": ids,
            "logits": f"logits_{i}.npy",
            "greedy": greedy,
            "top2_margin_min": top2_margins(logits).min().item(),  # over the prompt logits
            "greedy_top2_margin_min": greedy_margin_min,  # over the greedy decision steps
        }
        if mtp is not None:
            seq = ids + greedy
            mtp_logits = teacher_forced_mtp_logits(model, mtp, torch.tensor([seq]))  # [T-1, V]
            save_npy(args.out / f"mtp_logits_{i}.npy", mtp_logits)
            entry.update({
                "mtp_sequence": seq,
                "mtp_logits": f"mtp_logits_{i}.npy",
                "mtp_top2_margin_min": top2_margins(mtp_logits).min().item(),
            })
        prompts.append(entry)
        print(f"[record_goldens] {args.model.name} prompt {i}: {length} ids, "
              f"logit std min {std_min:.3f}, greedy {greedy[:8]}..."
              + (", mtp rows %d" % (len(ids) + len(greedy) - 1) if mtp is not None else ""))

    goldens = {
        "model": args.model.resolve().name,
        "command": " ".join(shlex.quote(a) for a in ["python3", os.path.relpath(sys.argv[0])]
                            + sys.argv[1:]),
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "numpy": np.__version__,
        },
        "dtype": "weights bf16 as stored, computed in float32 on CPU (eager attention)",
        "seed": args.seed,
        "greedy_tokens": args.greedy_tokens,
        "has_mtp": mtp is not None,
        "prompts": prompts,
    }
    (args.out / "goldens.json").write_text(json.dumps(goldens, indent=1) + "\n")


if __name__ == "__main__":
    main()
