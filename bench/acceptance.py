"""Greedy MTP acceptance and speed on the shipped model, measured by tandem itself.

Runs `tandem generate` on held-out prompts (bench/prompts/tandem-tiny-validation.jsonl: 16
validation-split documents, first ~200 characters, with their token ids) without speculation and with MTP at each k, in
the same run, and writes JSON with the machine, commit and command.

  python3 bench/acceptance.py --model models/tandem-tiny-qwen35 --ks 1,2,3 --max-tokens 96 \
      --threads 1 --out bench/results/acceptance-cpu.json
"""
import argparse
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(binary, model, ids, k, max_tokens, threads, device):
    # Token ids (recorded with `tandem tokenize`, equal to HF tokenizers) so that no tokenizer runs here.
    cmd = [binary, "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
           "--max-tokens", str(max_tokens),
           "--json", "--ignore-eos", "--threads", str(threads), "--device", device]
    if k == "adaptive":
        cmd += ["--speculative", "mtp", "--num-speculative-tokens", "3", "--speculation-control", "adaptive"]
    elif k > 0:
        cmd += ["--speculative", "mtp", "--num-speculative-tokens", str(k), "--speculation-control", "fixed"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models/tandem-tiny-qwen35"))
    ap.add_argument("--prompts", default=os.path.join(ROOT, "bench/prompts/tandem-tiny-validation.jsonl"))
    ap.add_argument("--binary", default=os.path.join(ROOT, "build/tandem"))
    ap.add_argument("--ks", default="1,2,3")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None)
    ap.add_argument("--commit", default=None, help="commit id to record (where there is no .git)")
    ap.add_argument("--adaptive", action="store_true", help="also run adaptive control (up to k=3)")
    a = ap.parse_args()
    prompts = [json.loads(l)["ids"] for l in open(a.prompts)]
    ks = [0] + [int(k) for k in a.ks.split(",")] + (["adaptive"] if a.adaptive else [])
    rows = {}
    for k in ks:
        acc = steps = gen = 0
        secs = 0.0
        tokens = []
        for p in prompts:
            r = run(a.binary, a.model, p, k, a.max_tokens, a.threads, a.device)
            s = r["stats"]
            gen += s["generated_tokens"] - 1  # the first token comes from the prefill
            secs += s["decode_seconds"]
            acc += s.get("accepted_tokens", 0)
            steps += s.get("drafting_steps", 0)
            tokens.append(r["tokens"])
        rows[k] = {"k": k, "decode_tokens_per_second": gen / secs,
                   "mean_acceptance_length": 1 + acc / steps if steps else 1.0,
                   "drafting_steps": steps, "accepted_tokens": acc, "tokens": tokens}
    plain = rows[0]
    for k in ks:
        rows[k]["speedup_vs_plain"] = rows[k]["decode_tokens_per_second"] / plain["decode_tokens_per_second"]
        rows[k]["identical_to_plain"] = rows[k]["tokens"] == plain["tokens"]
    commit = a.commit or subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                                        text=True).stdout.strip()
    result = {"machine": {"node": platform.node(), "cpu": platform.processor() or platform.machine(),
                          "cores": os.cpu_count()},
              "commit": commit, "command": " ".join([sys.executable] + sys.argv),
              "model": a.model, "prompts": len(prompts), "max_tokens": a.max_tokens, "threads": a.threads,
              "device": a.device,
              "results": [{k2: v for k2, v in rows[k].items() if k2 != "tokens"} for k in ks]}
    text = json.dumps(result, indent=2)
    if a.out:
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
        open(a.out, "w").write(text + "\n")
    print(text)
    for k in ks:
        r = rows[k]
        print(f"k={k}: {r['decode_tokens_per_second']:.1f} tok/s, x{r['speedup_vs_plain']:.2f} vs plain, "
              f"mean acceptance {r['mean_acceptance_length']:.2f}, identical={r['identical_to_plain']}",
              file=sys.stderr)


if __name__ == "__main__":
    main()
