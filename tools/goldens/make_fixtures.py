#!/usr/bin/env python3
"""Build the random-weight Qwen3.5 test checkpoints under tests/fixtures/models/ and their goldens.

Command (from the repository root; rebuilds everything, deterministically):
    python3 tools/goldens/make_fixtures.py [--only tiny-text,tiny-vl,small]

Each fixture is saved exactly as Hugging Face releases are laid out: config.json,
generation_config.json and safetensors as `save_pretrained` writes them (bf16 weights), plus the 15
tensors of a dense MTP block (`mtp.*`, top level, bf16; transformers ignores them on load), built
with tools/qwen35_mtp.py. Weights are initialised so logits are not flat and GDN decay gates vary.
Then tools/goldens/record_goldens.py is run on it (as a subprocess, so goldens.json records that
script's own command line) into tests/fixtures/models/<name>/golden/.

Fixtures:
  tiny-text  qwen3_5_text (model.layers.*), tied embeddings, explicit layer_types, rope_parameters,
             single model.safetensors, all tensors bf16.
  tiny-vl    qwen3_5 VL wrapper (text_config, model.language_model.*, a tiny model.visual.*),
             untied lm_head, no layer_types (full_attention_interval: 4), legacy rope_theta /
             partial_rotary_factor in text_config, 2 shards + model.safetensors.index.json,
             A_log stored fp32 as in the released checkpoints (values bf16-representable).
  small      qwen3_5_text, untied, rope_parameters (theta 1e7, with mRoPE keys), the largest
             (CPU speed numbers); A_log fp32 as released.
This script does not build MoE (qwen3_5_moe) or Qwen3-Next checkpoints.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import (Qwen3_5Config, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration,
                          Qwen3_5TextConfig)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
from qwen35_mtp import Qwen35MTP, language_model_of, mtp_state_dict  # noqa: E402

FIXTURE_ROOT = REPO / "tests" / "fixtures" / "models"

# One entry per fixture. `text` holds Qwen3_5TextConfig arguments.
FIXTURES = {
    "tiny-text": dict(
        # Tied: the input embedding is also the output matrix, so with 0.05 the residual stream
        # stays close to the input embedding and greedy repeats the last token forever; 0.1 lets
        # the layers dominate (greedy continuations then have ~25 distinct tokens out of 32).
        seed=1001, layout="text", tied=True, matrix_std=0.1, a_log_fp32=False, shard_bytes=None,
        text=dict(vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, linear_num_key_heads=2,
                  linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
                  linear_conv_kernel_dim=4, intermediate_size=128,
                  layer_types=["linear_attention"] * 3 + ["full_attention"],
                  rope_parameters=dict(rope_type="default", rope_theta=1e7,
                                       partial_rotary_factor=0.25))),
    "tiny-vl": dict(
        seed=1002, layout="vl", tied=False, matrix_std=0.05, a_log_fp32=True, shard_bytes=1_200_000,
        legacy_rope=dict(rope_theta=5e6, partial_rotary_factor=0.25),  # rotary dim 48*0.25 = 12
        text=dict(vocab_size=640, hidden_size=96, num_hidden_layers=8, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=48, linear_num_key_heads=2,
                  linear_num_value_heads=6, linear_key_head_dim=16, linear_value_head_dim=24,
                  linear_conv_kernel_dim=4, intermediate_size=160,
                  rope_parameters=dict(rope_type="default", rope_theta=5e6,
                                       partial_rotary_factor=0.25))),
    # The brief's hidden 256 / intermediate 640 would be ~15 MB in bf16 (the attention and GDN
    # projections alone are ~5 MB at hidden 256), over the 8 MB budget; hidden 128 and
    # intermediate 384 keep every head shape (8 q / 2 kv heads of 64, Hk 4, Hv 8, dk = dv = 32).
    "small": dict(
        seed=1003, layout="text", tied=False, matrix_std=0.05, a_log_fp32=True, shard_bytes=None,
        text=dict(vocab_size=2048, hidden_size=128, num_hidden_layers=8, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=64, linear_num_key_heads=4,
                  linear_num_value_heads=8, linear_key_head_dim=32, linear_value_head_dim=32,
                  linear_conv_kernel_dim=4, intermediate_size=384,
                  layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 2,
                  rope_parameters=dict(rope_type="default", rope_theta=1e7,
                                       partial_rotary_factor=0.25, mrope_section=[3, 3, 2],
                                       mrope_interleaved=True))),
}

# A tiny vision tower so the VL wrapper keeps real `model.visual.*` tensors at a few KB.
TINY_VISION = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=32, patch_size=4,
                   temporal_patch_size=2, spatial_merge_size=2, num_position_embeddings=16)

ZERO_CENTRED_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight",
                      "q_norm.weight", "k_norm.weight", "pre_fc_norm_embedding.weight",
                      "pre_fc_norm_hidden.weight")


def build_model(spec: dict):
    """The HF model (fp32, default init) for a fixture spec."""
    text_cfg = Qwen3_5TextConfig(tie_word_embeddings=spec["tied"], **spec["text"])
    if spec["layout"] == "text":
        model = Qwen3_5ForCausalLM(text_cfg)
    else:
        cfg = Qwen3_5Config(text_config=text_cfg.to_dict(),
                            vision_config=dict(TINY_VISION, out_hidden_size=text_cfg.hidden_size),
                            tie_word_embeddings=spec["tied"])
        model = Qwen3_5ForConditionalGeneration(cfg)
    model.set_attn_implementation("eager")  # as record_goldens loads it: no backend dependence
    return model


@torch.no_grad()
def init_weights(named_params, hidden: int, matrix_std: float, gen: torch.Generator) -> None:
    """Test-friendly init of the language model / MTP parameters (not the vision tower).

    - A_log: log(A), A uniform in [1, 16]; dt_bias uniform in [-1, 1]: decays exp(g) spread out.
    - zero-centred RMSNorm weights (used as 1 + w): N(0, 0.1).
    - GDN gated norm weight (used as is): 1 + N(0, 0.1).
    - conv1d: N(0, 0.3); embedding and lm_head: N(0, 2/sqrt(H)) so logits have std ~2;
      every other matrix N(0, matrix_std) (0.05, or 0.1 for the tied fixture).
    """
    def normal(p, std, mean=0.0):
        p.copy_(torch.randn(p.shape, generator=gen) * std + mean)

    for name, p in named_params:
        if name.endswith("A_log"):
            p.copy_(torch.empty(p.shape).uniform_(math.log(1.0), math.log(16.0), generator=gen))
        elif name.endswith("dt_bias"):
            p.copy_(torch.empty(p.shape).uniform_(-1.0, 1.0, generator=gen))
        elif name.endswith("linear_attn.norm.weight"):
            normal(p, 0.1, mean=1.0)
        elif name.endswith(ZERO_CENTRED_NORMS) or name.endswith("norm.weight"):
            normal(p, 0.1)  # final model.norm and mtp.norm included
        elif name.endswith("conv1d.weight"):
            normal(p, 0.3)
        elif name.endswith(("embed_tokens.weight", "lm_head.weight")):
            normal(p, 2.0 / math.sqrt(hidden))
        elif p.dim() >= 2:
            normal(p, matrix_std)
        else:
            raise AssertionError(f"init_weights: no rule for {name} {tuple(p.shape)}")


def to_release_dtypes(module: torch.nn.Module, a_log_fp32: bool) -> None:
    """bf16 everywhere; optionally A_log kept fp32 (as released) but rounded through bf16 first,
    so that loading it as bf16 or fp32 gives the same values."""
    module.to(torch.bfloat16)
    if a_log_fp32:
        for name, p in module.named_parameters():
            if name.endswith("A_log"):
                p.data = p.data.float()


def add_tensors_to_checkpoint(out: Path, extra: dict[str, torch.Tensor]) -> None:
    """Add `mtp.*` tensors to the saved checkpoint: into the single file, or into the last shard
    with the index's weight_map and total_size updated (same format save_pretrained writes)."""
    index_path = out / "model.safetensors.index.json"
    if index_path.exists():
        index = json.loads(index_path.read_text())
        target = sorted(set(index["weight_map"].values()))[-1]
    else:
        index, target = None, "model.safetensors"
    path = out / target
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata()
    tensors = load_file(path)
    tensors.update({k: v.contiguous() for k, v in extra.items()})
    save_file(tensors, path, metadata=metadata)
    if index is not None:
        for k, v in extra.items():
            index["weight_map"][k] = target
        index["weight_map"] = dict(sorted(index["weight_map"].items()))
        index["metadata"]["total_size"] += sum(v.numel() * v.element_size() for v in extra.values())
        if "total_parameters" in index["metadata"]:
            index["metadata"]["total_parameters"] += sum(v.numel() for v in extra.values())
        index_path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def edit_vl_config(out: Path, spec: dict) -> None:
    """tiny-vl: drop layer_types (keep only full_attention_interval) and replace rope_parameters by
    the legacy rope_theta / partial_rotary_factor fields in text_config."""
    path = out / "config.json"
    cfg = json.loads(path.read_text())
    tc = cfg["text_config"]
    assert "layer_types" in tc and "rope_parameters" in tc, "transformers changed its serialisation"
    del tc["layer_types"]
    tc["full_attention_interval"] = 4
    del tc["rope_parameters"]
    tc.update(spec["legacy_rope"])
    cfg["text_config"] = dict(sorted(tc.items()))
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


@torch.no_grad()
def check_checkpoint(out: Path, spec: dict, ref_model) -> None:
    """Reload with transformers and check logits, layer types, rope, flatness and gates."""
    cls = type(ref_model)
    loaded = cls.from_pretrained(out, dtype=torch.bfloat16, attn_implementation="eager")
    loaded = loaded.float().eval()
    tcfg = loaded.config.get_text_config()
    n_layers = spec["text"]["num_hidden_layers"]
    expect_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention"
                    for i in range(n_layers)]
    assert tcfg.layer_types == expect_types, f"layer types {tcfg.layer_types}"
    want_rope = spec.get("legacy_rope", spec["text"]["rope_parameters"])
    assert tcfg.rope_parameters["rope_theta"] == want_rope["rope_theta"], tcfg.rope_parameters
    assert tcfg.rope_parameters["partial_rotary_factor"] == want_rope["partial_rotary_factor"]
    inv_freq = language_model_of(loaded).rotary_emb.inv_freq
    rd = int(spec["text"]["head_dim"] * want_rope["partial_rotary_factor"])
    assert inv_freq.numel() == rd // 2 and math.isclose(
        inv_freq[1].item(), want_rope["rope_theta"] ** (-2 / rd), rel_tol=1e-6), inv_freq

    # Same logits as the in-memory model (whose weights are the same bf16 values, upcast).
    ids = torch.randint(0, tcfg.vocab_size, (1, 50), generator=torch.Generator().manual_seed(7))
    want = ref_model(input_ids=ids).logits
    got = loaded(input_ids=ids).logits
    assert torch.equal(want, got), f"reloaded logits differ: {(want - got).abs().max()}"
    assert got[0].std(dim=-1).min() > 0.5, f"logits flat: std {got[0].std(dim=-1).min()}"

    # GDN decay gates exp(g), g = -exp(A_log) * softplus(a + dt_bias), must vary.
    decays = []
    lm = language_model_of(loaded)
    hooks = []
    for layer in lm.layers:
        if hasattr(layer, "linear_attn"):
            la = layer.linear_attn
            hooks.append(la.in_proj_a.register_forward_hook(
                lambda m, i, a, la=la: decays.append(
                    torch.exp(-la.A_log.float().exp() * torch.nn.functional.softplus(
                        a.float() + la.dt_bias)).flatten())))
    loaded(input_ids=ids)
    for h in hooks:
        h.remove()
    d = torch.cat(decays)
    mid = ((d > 0.05) & (d < 0.95)).float().mean().item()
    assert d.std() > 0.1 and mid > 0.2, f"GDN decays do not vary: std {d.std()}, in (.05,.95) {mid}"
    print(f"[make_fixtures] {out.name}: reload ok, logit std min {got[0].std(dim=-1).min():.3f}, "
          f"decay mean {d.mean():.3f} std {d.std():.3f}, {mid:.0%} in (0.05, 0.95)")


def make_fixture(name: str, spec: dict) -> None:
    out = FIXTURE_ROOT / name
    if out.exists():
        shutil.rmtree(out)
    torch.manual_seed(spec["seed"])  # vision tower keeps transformers' own (seeded) init
    gen = torch.Generator().manual_seed(spec["seed"])
    model = build_model(spec).eval()
    hidden = spec["text"]["hidden_size"]
    lm_params = [(n, p) for n, p in model.named_parameters() if "visual" not in n]
    init_weights(lm_params, hidden, spec["matrix_std"], gen)
    mtp = Qwen35MTP(model.config)
    init_weights(mtp_state_dict_params(mtp), hidden, spec["matrix_std"], gen)

    # Non-persistent fp32 buffers (RoPE inv_freq) would be rounded by the bf16 round trip below;
    # keep them so the in-memory reference matches a fresh load.
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    to_release_dtypes(model, spec["a_log_fp32"])
    mtp.to(torch.bfloat16)
    kwargs = {"max_shard_size": spec["shard_bytes"]} if spec["shard_bytes"] else {}
    model.save_pretrained(out, **kwargs)
    mtp_tensors = mtp_state_dict(mtp)
    assert len(mtp_tensors) == 15, sorted(mtp_tensors)
    add_tensors_to_checkpoint(out, mtp_tensors)
    if spec["layout"] == "vl":
        edit_vl_config(out, spec)
        n_shards = len(list(out.glob("model-*.safetensors")))
        assert n_shards == 2, f"tiny-vl has {n_shards} shards, want 2"

    model.float().eval()
    for n, b in model.named_buffers():
        b.copy_(buffers[n])
    check_checkpoint(out, spec, model)

    cmd = ["python3", "tools/goldens/record_goldens.py", "--model", f"tests/fixtures/models/{name}",
           "--out", f"tests/fixtures/models/{name}/golden"]
    print("[make_fixtures] " + " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=REPO, check=True)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"[make_fixtures] {name}: {size / 1e6:.2f} MB")


def mtp_state_dict_params(mtp: Qwen35MTP):
    """(checkpoint name, parameter) pairs, so init rules see e.g. `mtp.norm.weight`."""
    return [(f"mtp.{n}", p) for n, p in mtp.named_parameters()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(FIXTURES), help="comma-separated fixture names")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.only.split(","):
        make_fixture(name, FIXTURES[name])
    # Budgets: the small checkpoint (without goldens) < 8 MB, everything < ~15 MB.
    sizes = {d.name: sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
             for d in FIXTURE_ROOT.iterdir() if d.is_dir()}
    total = sum(sizes.values())
    print(f"[make_fixtures] tests/fixtures/models: {total / 1e6:.2f} MB "
          + ", ".join(f"{k} {v / 1e6:.2f}" for k, v in sorted(sizes.items())))
    small = FIXTURE_ROOT / "small"
    if small.exists():
        ckpt = sum(f.stat().st_size for f in small.iterdir() if f.is_file())
        assert ckpt < 8e6, f"small checkpoint is {ckpt / 1e6:.2f} MB, budget 8 MB"
    assert total < 15.5e6, f"fixtures total {total / 1e6:.2f} MB, budget ~15 MB"


if __name__ == "__main__":
    main()
