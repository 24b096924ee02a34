#!/usr/bin/env python3
"""The seeds' endpoint canaries as a harness (issue 15): N greedy requests at concurrency C through
`tandem serve` -- a JSON-output prompt, a short-answer (color) prompt and a mix of others, every
fourth one streamed -- each response (text, completion tokens, finish reason) compared bit for bit
with the plain decoding of its prompt run alone (`tandem generate --prompts --max-num-seqs 1`). Prints every divergence with its request ids, writes a JSON summary
(machine, commit, command, N, C, k, divergences, throughput) and exits 1 on any divergence or
failed request. Standard library only, so it runs wherever the server does.

  bench/canary.py --binary build/tandem --model models/tandem-tiny-qwen35 -n 200 -c 16 -k 3
      starts a plain server and an MTP server in turn and checks both against the reference;
  bench/canary.py --url http://127.0.0.1:8000 --binary build/tandem --model DIR -n 10000 -c 64
      checks a server already running (its flags are its own; --label names it in the summary).
"""

import argparse
import concurrent.futures as cf
import http.client
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# (kind, endpoint, prompt, max_tokens). The first two are the seeds' canaries.
PROMPTS = [
    ("json", "chat", "Return a JSON object describing a person with the keys name, age and city. "
     "Output only the JSON, no prose.", 96),
    ("color", "chat", "What is the color of a clear daytime sky? Answer with one word: blue, "
     "green, orange or red.", 16),
    ("json-completion", "text", '{"name": "Alice", "age": 30, "city": "', 64),
    ("chat-fortune", "chat", "Tell me a fortune.", 48),
    ("chat-capital", "chat", "What is the capital of France?", 32),
    ("text-bible", "text", "In the beginning God created", 64),
    ("text-code", "text", "def fibonacci(n):", 64),
    ("text-qa", "text", "Q: What is the capital of France?\nA:", 32),
    ("text-greek", "text", "The Greek letters α β γ δ ε", 48),
    ("text-short", "text", "Hello", 8),
    ("text-long-prompt", "text", "The Debian project is an association of individuals who have "
     "made common cause to create a free operating system. " * 8, 48),
    ("chat-multibyte", "chat", "Привет мир, как дела?", 40),
]


def machine():
    info = {"host": platform.node(), "system": platform.platform(), "cpu": platform.processor(),
            "cores": os.cpu_count()}
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10)
        if gpus.returncode == 0 and gpus.stdout.strip():
            info["gpus"] = gpus.stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def commit():
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def reference(binary, model, prompts, extra):
    """Plain greedy decoding of each prompt alone: --max-num-seqs 1, no speculation."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for _, endpoint, prompt, max_tokens in prompts:
            f.write(json.dumps({"prompt": prompt, "max_tokens": max_tokens,
                                "chat": endpoint == "chat"}) + "\n")
        path = f.name
    try:
        p = subprocess.run([binary, "generate", "--model", model, "--prompts", path,
                            "--max-num-seqs", "1", *extra], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"canary: the reference run failed:\n{p.stderr[-3000:]}")
        rows = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
        rows = sorted((r for r in rows if "index" in r), key=lambda r: r["index"])
        return [{"text": r["text"], "completion_tokens": len(r["tokens"]),
                 "finish_reason": r["finish_reason"]} for r in rows]
    finally:
        os.unlink(path)


class Server:
    """`tandem serve --port 0`, ready once it prints its listening line."""

    def __init__(self, binary, model, args):
        self.cmd = [binary, "serve", "--model", model, "--port", "0", *args]
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.url, self.log = None, []
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                line = line.decode("utf-8", "replace").rstrip("\n")
                if not line.startswith("{"):  # keep the start-up lines, not the access log
                    self.log.append(line)
                m = re.search(r"tandem serve: listening on (http://\S+)", line)
                if m and not ready.is_set():
                    self.url = m.group(1)
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 600
        while not ready.wait(0.1):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                sys.exit("canary: the server did not start:\n" + "\n".join(self.log[-40:]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def served_model(url):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("GET", "/v1/models", headers=auth_headers())
    r = c.getresponse()
    body = r.read()
    if r.status != 200:
        sys.exit(f"canary: GET /v1/models: {r.status} {body[:300]!r}")
    return json.loads(body)["data"][0]["id"]


def auth_headers():
    key = os.environ.get("TANDEM_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def sse_text(data, chat):
    """Concatenated choice-0 text, finish reason, usage and speculation of an SSE body."""
    text, finish, usage, spec = [], None, None, {}
    events = data.decode("utf-8").split("\n\n")
    if events[-2:] != ["data: [DONE]", ""]:
        raise ValueError(f"stream does not end with [DONE]: {data[-200:]!r}")
    for ev in events[:-2]:
        if not ev.startswith("data: "):
            raise ValueError(f"not an SSE data event: {ev[:200]!r}")
        j = json.loads(ev[6:])
        for c in j.get("choices", []):
            text.append((c.get("delta") or {}).get("content") or "" if chat else c.get("text", ""))
            finish = c.get("finish_reason") or finish
        usage = j.get("usage") or usage
        spec = j.get("speculation") or spec
    return "".join(text), finish, usage, spec


def run(url, model_name, prompts, n, concurrency, timeout, stream_every):
    """Sends n requests (prompt i % len(prompts)) with at most `concurrency` in flight, each on
    its own keep-alive connection per worker; request i streams when stream_every divides i + 1.
    Returns the results in request order."""
    u = urllib.parse.urlparse(url)
    local = threading.local()

    def send(i):
        kind, endpoint, prompt, max_tokens = prompts[i % len(prompts)]
        stream = bool(stream_every) and (i + 1) % stream_every == 0
        body = {"model": model_name, "max_tokens": max_tokens, "temperature": 0}
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        if endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            path = "/v1/chat/completions"
        else:
            body["prompt"] = prompt
            path = "/v1/completions"
        t0 = time.monotonic()
        for attempt in range(2):  # a keep-alive connection the server closed is reopened once
            if getattr(local, "conn", None) is None:
                local.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
            try:
                local.conn.request("POST", path, body=json.dumps(body),
                                   headers={"Content-Type": "application/json", **auth_headers()})
                r = local.conn.getresponse()
                data = r.read()
                break
            except (http.client.HTTPException, OSError) as e:
                local.conn.close()
                local.conn = None
                if attempt:
                    return {"index": i, "error": f"{type(e).__name__}: {e}"}
        out = {"index": i, "status": r.status, "seconds": time.monotonic() - t0}
        if r.status != 200:
            out["error"] = f"HTTP {r.status}: {data[:300]!r}"
            return out
        out["stream"] = stream
        try:
            if stream:
                text, finish, usage, spec = sse_text(data, endpoint == "chat")
                first = json.loads(data.split(b"\n\n", 1)[0][6:])
                out.update(id=first["id"], text=text, finish_reason=finish,
                           completion_tokens=(usage or {}).get("completion_tokens"),
                           speculation=spec)
                return out
            j = json.loads(data)
            c = j["choices"][0]
            out.update(id=j["id"], text=c["message"]["content"] if endpoint == "chat" else
                       c["text"], completion_tokens=j["usage"]["completion_tokens"],
                       finish_reason=c["finish_reason"], speculation=j.get("speculation") or {})
        except (ValueError, KeyError, IndexError, TypeError) as e:
            out["error"] = f"bad response ({type(e).__name__}: {e}): {data[:300]!r}"
        return out

    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(concurrency) as ex:
        results = list(ex.map(send, range(n)))
    return results, time.monotonic() - t0


def compare(label, prompts, refs, results, seconds):
    divergences, errors = [], []
    for r in results:
        p = r["index"] % len(prompts)
        if "error" in r:
            errors.append({"request": r["index"], "kind": prompts[p][0], "error": r["error"]})
            continue
        ref = refs[p]
        got = {k: r[k] for k in ("text", "completion_tokens", "finish_reason")}
        if got != ref:
            at = next((i for i, (a, b) in enumerate(zip(got["text"], ref["text"])) if a != b),
                      min(len(got["text"]), len(ref["text"])))
            divergences.append({"request": r["index"], "id": r["id"], "kind": prompts[p][0],
                                "stream": r["stream"],
                                "first_difference_at_char": at,
                                "got": got["text"][max(0, at - 20):at + 60],
                                "expected": ref["text"][max(0, at - 20):at + 60],
                                "got_tokens": got["completion_tokens"],
                                "expected_tokens": ref["completion_tokens"],
                                "got_finish": got["finish_reason"],
                                "expected_finish": ref["finish_reason"]})
    ok = [r for r in results if "error" not in r]
    tokens = sum(r["completion_tokens"] for r in ok)
    drafts = sum(r["speculation"].get("drafting_steps", 0) for r in ok)
    accepted = sum(r["speculation"].get("accepted_tokens", 0) for r in ok)
    lat = sorted(r["seconds"] for r in ok)
    summary = {
        "label": label, "requests": len(results), "divergences": len(divergences),
        "errors": len(errors), "seconds": round(seconds, 3),
        "output_tokens": tokens, "output_tokens_per_second": round(tokens / seconds, 1),
        "requests_per_second": round(len(results) / seconds, 2),
        "latency_p50_seconds": round(lat[len(lat) // 2], 4) if lat else None,
        "latency_p99_seconds": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 4)
        if lat else None,
        "mean_acceptance_length": round(1 + accepted / drafts, 4) if drafts else None,
        "divergence_list": divergences[:100], "error_list": errors[:100],
    }
    print(f"[{label}] {len(results)} requests in {seconds:.1f} s: {len(divergences)} divergences, "
          f"{len(errors)} errors, {summary['output_tokens_per_second']} output tok/s, "
          f"{summary['requests_per_second']} req/s, mean acceptance length "
          f"{summary['mean_acceptance_length']}", flush=True)
    for d in divergences[:20]:
        print(f"  DIVERGED request {d['request']} ({d['id']}, {d['kind']}"
              f"{', streamed' if d['stream'] else ''}) at char "
              f"{d['first_difference_at_char']}: got {d['got']!r} expected {d['expected']!r} "
              f"(tokens {d['got_tokens']}/{d['expected_tokens']}, finish {d['got_finish']}/"
              f"{d['expected_finish']})", flush=True)
    for e in errors[:10]:
        print(f"  FAILED request {e['request']} ({e['kind']}): {e['error']}", flush=True)
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "tandem"),
                    help="tandem binary: the reference, and the servers when --url is not given")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "tandem-tiny-qwen35"))
    ap.add_argument("--url", help="check this running server instead of starting servers")
    ap.add_argument("--label", default="server", help="with --url: the run's name in the summary")
    ap.add_argument("-n", "--requests", type=int, default=200)
    ap.add_argument("-c", "--concurrency", type=int, default=16)
    ap.add_argument("-k", "--num-speculative-tokens", type=int, default=3)
    ap.add_argument("--speculation-control", default="fixed", choices=["fixed", "adaptive"],
                    help="of the MTP server (fixed: every step drafts k, the hardest case)")
    ap.add_argument("--modes", default="plain,mtp",
                    help="servers to start, in order (without --url): plain and/or mtp")
    ap.add_argument("--server-args", default="",
                    help="extra flags for the servers and the reference, e.g. '--device cuda'")
    ap.add_argument("--max-num-seqs", type=int, default=None,
                    help="of the servers (default: max(16, concurrency))")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per request")
    ap.add_argument("--stream-every", type=int, default=4,
                    help="every S-th request streams (SSE, text concatenated); 0: none")
    ap.add_argument("--out", default="canary.json", help="JSON summary")
    a = ap.parse_args()

    extra = a.server_args.split()
    refs = reference(a.binary, a.model, PROMPTS, extra)
    runs = []
    if a.url:
        results, seconds = run(a.url, served_model(a.url), PROMPTS, a.requests, a.concurrency,
                               a.timeout, a.stream_every)
        runs.append(compare(a.label, PROMPTS, refs, results, seconds))
    else:
        seqs = a.max_num_seqs or max(16, a.concurrency)
        for mode in a.modes.split(","):
            args = ["--max-num-seqs", str(seqs), *extra]
            if mode == "mtp":
                args += ["--speculative", "mtp", "--num-speculative-tokens",
                         str(a.num_speculative_tokens), "--speculation-control",
                         a.speculation_control]
            elif mode != "plain":
                sys.exit(f"canary: unknown mode {mode}")
            server = Server(a.binary, a.model, args)
            try:
                results, seconds = run(server.url, served_model(server.url), PROMPTS, a.requests,
                                       a.concurrency, a.timeout, a.stream_every)
            finally:
                code = server.stop()
            s = compare(mode, PROMPTS, refs, results, seconds)
            s["server_command"] = " ".join(server.cmd)
            s["server_exit_code"] = code
            runs.append(s)

    summary = {"machine": machine(), "commit": commit(), "command": " ".join(sys.argv),
               "requests": a.requests, "concurrency": a.concurrency,
               "k": a.num_speculative_tokens, "speculation_control": a.speculation_control,
               "streamed_every": a.stream_every,
               "prompts": [{"kind": k, "endpoint": e, "max_tokens": m, "reference": r["text"]}
                           for (k, e, _, m), r in zip(PROMPTS, refs)],
               "divergences": sum(r["divergences"] for r in runs),
               "errors": sum(r["errors"] for r in runs), "runs": runs,
               "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1, ensure_ascii=False)
        f.write("\n")
    exits = [r["server_exit_code"] for r in runs if r.get("server_exit_code") not in (None, 0)]
    if exits:
        print(f"canary: a server did not exit 0 on SIGTERM: {exits}")
    bad = summary["divergences"] + summary["errors"] + len(exits)
    print(f"canary: {summary['divergences']} divergences, {summary['errors']} errors over "
          f"{len(runs)} run(s) of {a.requests} requests at concurrency {a.concurrency}; "
          f"summary in {a.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
