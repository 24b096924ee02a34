"""Assemble and verify the released model folder from a training run's output.

What: merges the bf16 shards written by train.py (model-0000{1,2}-of-00002.safetensors) into one
models/<name>/model.safetensors (HF layout, `mtp.*` tensors at top level, lm_head tied so absent),
copies config.json / train_log.json next to the tokenizer files written by train_tokenizer.py,
then verifies on the CPU, from the exported bf16 file (weights upcast to fp32):
  * transformers loads it with no missing keys (mtp.* ignored, as for released Qwen3.5);
  * the validation loss / perplexity / top-1 of the main head over the validation split
    (non-overlapping windows of --seq tokens, as in training);
  * the MTP head (tools/qwen35_mtp.py): CE, top-1 vs the data token t+2 and top-1 vs the main
    model's own argmax at t+1 (teacher forced) on validation;
  * simulated greedy speculative decoding on continuations of held-out validation prompts: the
    main model's greedy text, drafted with the MTP head for k=1 and k=3 (chained: the draft's
    post-norm hidden and draft token feed the next MTP step, the MTP attends over its own
    positions), giving the mean acceptance length (accepted drafts + 1 per verify step);
  * greedy samples from a few prompts.
Results go to models/<name>/eval.json.

Run (repo root; CPU, a few minutes):
  python3 tools/train/export.py --run /work/.device/1 --model-dir models/tandem-tiny-qwen35
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from qwen35_mtp import Qwen35MTP, language_model_of  # noqa: E402

PROMPTS = [
    "In the beginning God created",
    "The Linux kernel provides",
    "To install a package on Debian, run",
    "Python is a programming language that",
    "A fortune cookie once said:",
]


def assemble(run: Path, md: Path):
    index = json.loads((run / "model.safetensors.index.json").read_text())
    sd = {}
    for shard in sorted(set(index["weight_map"].values())):
        sd.update(load_file(str(run / shard)))
    assert set(sd) == set(index["weight_map"]), "index / shard mismatch"
    assert all(v.dtype == torch.bfloat16 for v in sd.values())
    sd = dict(sorted(sd.items()))
    save_file(sd, str(md / "model.safetensors"), metadata={"format": "pt"})
    shutil.copyfile(run / "config.json", md / "config.json")
    shutil.copyfile(run / "train_log.json", md / "train_log.json")
    return sd


@torch.no_grad()
def main_and_mtp_eval(model, mtp, lm, val, seq, bs=16):
    V = model.config.vocab_size
    n = (val.numel() - 1) // seq
    sums = dict(main_ce=0.0, main_acc=0.0, mtp_ce=0.0, mtp_acc_data=0.0, mtp_acc_main=0.0)
    cnt_main = cnt_mtp = 0
    for i in range(0, n, bs):
        starts = torch.arange(i, min(n, i + bs)) * seq
        w = val[starts[:, None] + torch.arange(seq + 1)]
        x, y = w[:, :-1], w[:, 1:]
        h = lm(input_ids=x).last_hidden_state
        logits = model.lm_head(h).float()
        pos = torch.arange(seq - 1)[None].expand(x.shape[0], -1)
        ml = model.lm_head(mtp(h[:, :-1], x[:, 1:], lm.embed_tokens, lm.rotary_emb, pos)).float()
        sums["main_ce"] += F.cross_entropy(logits.reshape(-1, V), y.reshape(-1), reduction="sum").item()
        sums["main_acc"] += (logits.argmax(-1) == y).sum().item()
        sums["mtp_ce"] += F.cross_entropy(ml.reshape(-1, V), y[:, 1:].reshape(-1), reduction="sum").item()
        mp = ml.argmax(-1)
        sums["mtp_acc_data"] += (mp == y[:, 1:]).sum().item()
        sums["mtp_acc_main"] += (mp == logits[:, 1:].argmax(-1)).sum().item()
        cnt_main += y.numel()
        cnt_mtp += y[:, 1:].numel()
    r = {k: v / (cnt_main if k.startswith("main") else cnt_mtp) for k, v in sums.items()}
    r["main_ppl"] = math.exp(r["main_ce"])
    r["mtp_ppl"] = math.exp(r["mtp_ce"])
    r["tokens"] = cnt_main
    return r


@torch.no_grad()
def greedy(model, ids, n):
    """Full-recompute greedy continuation (the definition)."""
    ids = list(ids)
    for _ in range(n):
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
        ids.append(int(logits.argmax()))
    return ids


@torch.no_grad()
def simulate_acceptance(model, mtp, lm, seq_ids, prompt_len, k):
    """Greedy speculative decoding over a greedy sequence: returns per-step acceptance lengths.

    At a verify step the target has processed tokens [0, p) and sampled x_p = g[p]. The MTP first
    pass has written its own context for pairs (h_i, g[i+1]), i < p; draft 1 comes from position
    p-1; draft j>1 is chained from the previous MTP post-norm hidden and draft j-1 at the next
    position. Drafts are accepted while they equal the greedy tokens; +1 for the bonus token.
    """
    g = torch.tensor([seq_ids])
    h = lm(input_ids=g).last_hidden_state  # [1, N, H]; exact for the greedy sequence
    N = g.shape[1]
    lens = []
    p = prompt_len  # g[p] is the first generated token, sampled by the target after the prompt
    while p + 1 < N:
        hid = h[:, :p]  # h_0 .. h_{p-1}
        nxt = g[:, 1:p + 1]  # g_1 .. g_p
        drafts = []
        for j in range(k):
            pos = torch.arange(hid.shape[1])[None]
            hm = mtp(hid, nxt, lm.embed_tokens, lm.rotary_emb, pos)
            d = int(model.lm_head(hm[:, -1]).argmax())
            drafts.append(d)
            hid = torch.cat([hid, hm[:, -1:]], 1)
            nxt = torch.cat([nxt, torch.tensor([[d]])], 1)
        acc = 0
        for j, d in enumerate(drafts):
            if p + 1 + j < N and d == int(g[0, p + 1 + j]):
                acc += 1
            else:
                break
        if p + 1 + acc >= N:  # ran off the end of the recorded sequence: stop, don't count
            break
        lens.append(acc + 1)
        p += acc + 1
    return lens


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, type=Path, help="train.py --out folder")
    ap.add_argument("--model-dir", default="models/tandem-tiny-qwen35", type=Path)
    ap.add_argument("--data", default=".corpus/tok", type=Path)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--sim-prompts", type=int, default=8)
    ap.add_argument("--sim-prompt-len", type=int, default=32)
    ap.add_argument("--sim-gen", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    md = args.model_dir
    t0 = time.time()
    sd = assemble(args.run, md)
    size = (md / "model.safetensors").stat().st_size
    print(f"wrote {md / 'model.safetensors'}: {size / 1e6:.2f} MB, {len(sd)} tensors", flush=True)

    from transformers import AutoModelForCausalLM, AutoTokenizer
    model, info = AutoModelForCausalLM.from_pretrained(str(md), output_loading_info=True, dtype=torch.bfloat16)
    assert not info["missing_keys"], info["missing_keys"]
    assert not info["mismatched_keys"], info["mismatched_keys"]
    model = model.float().eval()
    lm = language_model_of(model)
    tok = AutoTokenizer.from_pretrained(str(md))
    mtp = Qwen35MTP(model.config)
    mtp_sd = {k[4:]: v.float() for k, v in sd.items() if k.startswith("mtp.")}
    missing, unexpected = mtp.load_state_dict(mtp_sd, strict=True)
    mtp.eval()
    n_main = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for p in mtp.parameters())
    print(f"loaded: missing {sorted(info['missing_keys'])}, unexpected (ignored) {len(info['unexpected_keys'])}; "
          f"params main {n_main:,} + mtp {n_mtp:,} = {n_main + n_mtp:,}", flush=True)

    val = torch.from_numpy(np.fromfile(args.data / "val.bin", dtype=np.uint16).astype(np.int64))
    ev = main_and_mtp_eval(model, mtp, lm, val, args.seq)
    print("validation (bf16 export, fp32 compute):", json.dumps(ev), flush=True)

    samples = []
    for ptxt in PROMPTS:
        ids = tok(ptxt).input_ids
        out = greedy(model, ids, 48)
        samples.append({"prompt": ptxt, "text": tok.decode(out)})
        print("---", repr(tok.decode(out)), flush=True)

    # held-out prompts: starts of validation documents (after each <|endoftext|>)
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    starts = [0] + (torch.nonzero(val == eos).flatten() + 1).tolist()
    starts = [s for s in starts if s + args.sim_prompt_len < val.numel()]
    pick = np.linspace(0, len(starts) - 1, args.sim_prompts).round().astype(int)
    sim = {1: [], 3: []}
    for i in pick:
        s = starts[i]
        prompt = val[s:s + args.sim_prompt_len].tolist()
        if eos in prompt:
            continue
        g = greedy(model, prompt, args.sim_gen)
        for k in (1, 3):
            sim[k] += simulate_acceptance(model, mtp, lm, g, len(prompt), k)
    acc = {f"k{k}": {"mean_acceptance_length": float(np.mean(v)), "verify_steps": len(v)} for k, v in sim.items()}
    print("simulated greedy acceptance:", json.dumps(acc), flush=True)

    tlog = json.loads((md / "train_log.json").read_text())
    result = {
        "model_file_bytes": size, "tensors": len(sd), "params_main": n_main, "params_mtp": n_mtp,
        "params_total": n_main + n_mtp, "loading_info": {"missing": sorted(info["missing_keys"]),
                                                         "unexpected_ignored": len(info["unexpected_keys"])},
        "validation_bf16_export": ev, "validation_train_log": tlog.get("final_val"),
        "simulated_acceptance": acc,
        "simulation": {"prompts": len(pick), "prompt_tokens": args.sim_prompt_len, "generated_tokens": args.sim_gen,
                       "source": "starts of validation documents"},
        "samples": samples, "seconds": round(time.time() - t0, 1),
    }
    (md / "eval.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"done in {result['seconds']}s")


if __name__ == "__main__":
    main()
