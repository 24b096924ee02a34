"""Train tandem-tiny-qwen35: a small Qwen3.5 (Gated DeltaNet + gated attention) model with one MTP layer.

What: builds transformers' Qwen3_5ForCausalLM (model_type qwen3_5_text, 3 GDN : 1 attention, tied
embeddings) plus tools/qwen35_mtp.Qwen35MTP, and trains both jointly on the pre-tokenized corpus
(.corpus/tok/*.bin from tokenize_corpus.py):
  loss = CE(main logits_t, x_{t+1})
       + lambda * [(1-alpha) * CE(mtp logits_t, x_{t+2}) + alpha * CE(mtp logits_t, softmax(main logits_{t+1}).detach())]
where the MTP row t sees (h_t after the target's final norm, x_{t+1}) at position t exactly as the
drafter computes it, and shares embed_tokens / lm_head with the target. The distillation term
pulls the MTP head towards the main model's own next-next prediction, which is what speculative
acceptance measures. bf16 autocast, AdamW, linear warmup then cosine decay over a WALL-CLOCK
budget (so the run always ends inside the device limit), periodic validation, best-validation
weights kept. At the end it evaluates the best weights on the whole validation split (main loss /
ppl / top-1, MTP loss / top-1 vs data / top-1 vs the main model's argmax) and writes to --out:
  config.json, model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json (bf16, HF
  layout, mtp.* tensors at top level, lm_head omitted because tied), train_log.json
tools/train/export.py then assembles the released folder under models/.

Run on the H200 (device tool), exactly as shipped:
  cd <repo> && PYTHONUNBUFFERED=1 python3 tools/train/train.py --data .corpus/tok --out $OUT --budget-s 420
  (device call: carry [".corpus/tok"], timeout_s 590)
Local CPU smoke test (tiny config, 20 steps):
  python3 tools/train/train.py --data .corpus/tok --out /tmp/smoke --preset smoke --max-steps 20 --device cpu
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

T_START = time.time()

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/ for qwen35_mtp
from qwen35_mtp import Qwen35MTP, mtp_state_dict  # noqa: E402
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402

PRESETS = {
    # ~13M parameters incl. embeddings and the MTP layer; bf16 file ~27 MB.
    "full": dict(hidden_size=320, intermediate_size=832, num_hidden_layers=8,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                 linear_num_key_heads=2, linear_num_value_heads=2,
                 linear_key_head_dim=128, linear_value_head_dim=128, mrope_section=[6, 5, 5]),
    "smoke": dict(hidden_size=64, intermediate_size=160, num_hidden_layers=4,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                  linear_num_key_heads=1, linear_num_value_heads=2,
                  linear_key_head_dim=32, linear_value_head_dim=32, mrope_section=[2, 1, 1]),
}


def make_config(preset: str, vocab: int, eos: int, im_end: int) -> Qwen3_5TextConfig:
    p = dict(PRESETS[preset])
    mrope = p.pop("mrope_section")
    n = p["num_hidden_layers"]
    cfg = Qwen3_5TextConfig(
        vocab_size=vocab, max_position_embeddings=4096, rms_norm_eps=1e-6, hidden_act="silu",
        tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0, linear_conv_kernel_dim=4,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)],
        rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": mrope, "mrope_interleaved": True},
        bos_token_id=eos, eos_token_id=eos, pad_token_id=None, initializer_range=0.02, **p)
    return cfg


def count(params) -> int:
    return sum(p.numel() for p in params)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=".corpus/tok")
    ap.add_argument("--out", default=os.environ.get("OUT", "out/train"))
    ap.add_argument("--preset", default="full", choices=sorted(PRESETS))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--mtp-lambda", type=float, default=0.7)
    ap.add_argument("--distill-alpha", type=float, default=0.5)
    ap.add_argument("--budget-s", type=float, default=420.0, help="wall-clock training budget")
    ap.add_argument("--deadline-s", type=float, default=540.0,
                    help="hard limit since process start: training stops early enough to finish by then")
    ap.add_argument("--max-steps", type=int, default=10**9)
    ap.add_argument("--eval-every-s", type=float, default=30.0)
    ap.add_argument("--eval-windows", type=int, default=64)
    ap.add_argument("--final-eval-tokens", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device(args.device)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    meta = json.loads((Path(args.data) / "meta.json").read_text())
    vocab = meta["vocab_size"]
    eos = meta["eos_id"]
    train_np = np.fromfile(Path(args.data) / "train.bin", dtype=np.uint16)
    val_np = np.fromfile(Path(args.data) / "val.bin", dtype=np.uint16)
    train_tok = torch.from_numpy(train_np.astype(np.int64)).to(dev)
    val_tok = torch.from_numpy(val_np.astype(np.int64)).to(dev)

    cfg = make_config(args.preset, vocab, eos, eos + 2)
    model = Qwen3_5ForCausalLM(cfg)
    mtp = Qwen35MTP(model.config)
    mtp.apply(model._init_weights)
    model.to(dev)
    mtp.to(dev)
    lm = model.model
    assert model.lm_head.weight.data_ptr() == lm.embed_tokens.weight.data_ptr(), "embeddings not tied"
    n_main = count(model.parameters())
    n_mtp = count(mtp.parameters())
    print(f"params: main {n_main:,} (embeddings {lm.embed_tokens.weight.numel():,}), mtp {n_mtp:,}, "
          f"total {n_main + n_mtp:,}; train tokens {train_tok.numel():,}, val tokens {val_tok.numel():,}; "
          f"attn impl {model.config._attn_implementation}", flush=True)

    named = list(model.named_parameters()) + [("mtp." + n, p) for n, p in mtp.named_parameters()]
    decay = [p for n, p in named if p.ndim >= 2 and "conv1d" not in n]
    no_decay = [p for n, p in named if not (p.ndim >= 2 and "conv1d" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
    T, B = args.seq, args.batch
    ar = torch.arange(T + 1, device=dev)
    autocast = torch.autocast(device_type=dev.type, dtype=torch.bfloat16)

    def forward_losses(w, with_metrics=False):
        """w [b, T+1] token windows -> dict of losses (and metrics)."""
        x, y = w[:, :-1], w[:, 1:]
        b, t = x.shape
        with autocast:
            h = lm(input_ids=x).last_hidden_state  # after the final norm
            logits = model.lm_head(h)
            pos = torch.arange(t - 1, device=dev)[None].expand(b, -1)
            hm = mtp(h[:, :-1], x[:, 1:], lm.embed_tokens, lm.rotary_emb, pos)
            mlog = model.lm_head(hm)
        logits = logits.float()
        mlog = mlog.float()
        main_ce = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        mtp_ce = F.cross_entropy(mlog.reshape(-1, vocab), y[:, 1:].reshape(-1))
        teacher = logits[:, 1:].detach()
        distill = -(teacher.softmax(-1) * mlog.log_softmax(-1)).sum(-1).mean()
        r = {"main_ce": main_ce, "mtp_ce": mtp_ce, "distill": distill}
        if with_metrics:
            r["main_acc"] = (logits.argmax(-1) == y).float().mean()
            mp = mlog.argmax(-1)
            r["mtp_acc_data"] = (mp == y[:, 1:]).float().mean()
            r["mtp_acc_main"] = (mp == teacher.argmax(-1)).float().mean()
        return r

    def total_loss(r):
        return r["main_ce"] + args.mtp_lambda * ((1 - args.distill_alpha) * r["mtp_ce"] + args.distill_alpha * r["distill"])

    g = torch.Generator(device="cpu").manual_seed(99)
    n_val_windows = max(1, (val_tok.numel() - 1) // T)
    fixed_val = torch.randperm(n_val_windows, generator=g)[:args.eval_windows].to(dev) * T

    @torch.no_grad()
    def evaluate(starts, bs=64):
        model.eval()
        mtp.eval()
        sums, n = {}, 0
        for i in range(0, starts.numel(), bs):
            s = starts[i:i + bs]
            w = val_tok[s[:, None] + ar]
            r = forward_losses(w, with_metrics=True)
            for k, v in r.items():
                sums[k] = sums.get(k, 0.0) + float(v) * s.numel()
            n += s.numel()
        model.train()
        mtp.train()
        return {k: v / n for k, v in sums.items()}

    def save(tag_dir: Path):
        """bf16 HF-layout export in 2 shards (each < 16 MiB) + index; lm_head omitted (tied)."""
        from safetensors.torch import save_file
        sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
        sd.update(mtp_state_dict(mtp))
        sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in sd.items()}
        keys = sorted(sd)
        total = sum(v.numel() * 2 for v in sd.values())
        shards, cur, size = [[]], 0, 0
        for k in keys:
            nb = sd[k].numel() * 2
            if size + nb > total / 2 and shards[-1] and len(shards) == 1:
                shards.append([])
                size = 0
            shards[-1].append(k)
            size += nb
        names = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
        wmap = {}
        for name, ks in zip(names, shards):
            save_file({k: sd[k] for k in ks}, str(tag_dir / name), metadata={"format": "pt"})
            wmap.update({k: name for k in ks})
        (tag_dir / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": total}, "weight_map": dict(sorted(wmap.items()))}, indent=2) + "\n")
        c = model.config.to_dict()
        c.update({"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
                  "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False,
                  "dtype": "bfloat16", "torch_dtype": "bfloat16", "use_cache": True})
        c.pop("_attn_implementation_autoset", None)
        (tag_dir / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")

    log = {"args": vars(args), "config": PRESETS[args.preset], "params_main": n_main, "params_mtp": n_mtp,
           "params_total": n_main + n_mtp, "train_tokens": int(train_tok.numel()), "val_tokens": int(val_tok.numel()),
           "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
           "torch": torch.__version__, "history": [], "evals": []}

    def write_log():
        (out / "train_log.json").write_text(json.dumps(log, indent=1) + "\n")

    budget = min(args.budget_s, args.deadline_s - (time.time() - T_START) - 60.0)
    print(f"startup {time.time() - T_START:.1f}s; training budget {budget:.0f}s", flush=True)
    best, best_state = float("inf"), None
    t0 = time.time()
    last_eval = t0
    step, tokens = 0, 0
    model.train()
    mtp.train()
    while step < args.max_steps:
        elapsed = time.time() - t0
        if elapsed >= budget:
            break
        frac = elapsed / budget
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (
            args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        starts = torch.randint(0, train_tok.numel() - T - 1, (B,), device=dev)
        w = train_tok[starts[:, None] + ar]
        r = forward_losses(w)
        loss = total_loss(r)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(list(model.parameters()) + list(mtp.parameters()), 1.0)
        opt.step()
        step += 1
        tokens += B * T
        if step % 50 == 0 or step <= 3 or step == args.max_steps:
            el = time.time() - t0
            rec = {"step": step, "t": round(el, 1), "tokens": tokens, "lr": lr, "loss": float(loss.detach()),
                   "main_ce": float(r["main_ce"]), "mtp_ce": float(r["mtp_ce"]), "distill": float(r["distill"]),
                   "grad_norm": float(gn), "tok_per_s": round(tokens / max(el, 1e-9))}
            log["history"].append(rec)
            if step % 200 == 0 or step <= 3:
                print(json.dumps(rec), flush=True)
        now = time.time()
        if now - last_eval >= args.eval_every_s or step == args.max_steps:
            last_eval = now
            ev = evaluate(fixed_val)
            ev.update({"step": step, "t": round(now - t0, 1), "tokens": tokens})
            log["evals"].append(ev)
            print("eval", json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in ev.items()}), flush=True)
            score = ev["main_ce"] + 0.5 * ev["mtp_ce"]
            if score < best:
                best = score
                best_state = ({k: v.detach().clone() for k, v in model.state_dict().items()},
                              {k: v.detach().clone() for k, v in mtp.state_dict().items()}, step)
            write_log()
    train_time = time.time() - t0
    ev = evaluate(fixed_val)
    ev.update({"step": step, "t": round(train_time, 1), "tokens": tokens})
    log["evals"].append(ev)
    if ev["main_ce"] + 0.5 * ev["mtp_ce"] >= best and best_state is not None:
        model.load_state_dict(best_state[0])
        mtp.load_state_dict(best_state[1])
        log["selected_step"] = best_state[2]
    else:
        log["selected_step"] = step
    log.update({"steps": step, "tokens_seen": tokens, "train_seconds": round(train_time, 1),
                "epochs": round(tokens / train_tok.numel(), 2)})
    # final: whole validation split (non-overlapping windows), capped
    n_final = min(n_val_windows, max(1, args.final_eval_tokens // T))
    final = evaluate(torch.arange(n_final, device=dev) * T)
    final["windows"] = n_final
    final["tokens"] = n_final * T
    final["main_ppl"] = math.exp(final["main_ce"])
    final["mtp_ppl"] = math.exp(final["mtp_ce"])
    log["final_val"] = final
    print("final", json.dumps(final), flush=True)
    save(out)
    log["total_seconds"] = round(time.time() - T_START, 1)
    write_log()
    print(f"done in {log['total_seconds']}s", flush=True)


if __name__ == "__main__":
    main()
