"""Helpers for the end-to-end tests of `tandem serve` (docs/server.md): a real server process on a
free port, raw HTTP over sockets, SSE and Prometheus parsers, and reference outputs from
`tandem generate`. Standard library only; the openai client is used by the tests themselves.
Not a client library: each helper does the one thing the tests need and checks nothing itself."""

import ctypes
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.join(ROOT, "models", "tandem-tiny-qwen35")
LISTENING = re.compile(rb"tandem serve: listening on http://([^\s:/]+):(\d+)")


def _die_with_parent():
    # A server outlives a killed pytest (CTest timeout) only as an orphan; PR_SET_PDEATHSIG ends it.
    try:
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except OSError:
        pass


class TandemServer:
    """One `tandem serve --port 0` process; start() returns when it printed its listening line."""

    def __init__(self, binary, model=MODEL, args=(), env=None, threads=1):
        self.binary, self.model, self.args = binary, model, list(args)
        self.env = dict(os.environ, **(env or {}))
        self.threads = threads
        self.proc = None
        self.host = self.port = None
        self.stderr_lines = []  # bytes, without the newline
        self._ready = threading.Event()
        self._lock = threading.Lock()

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    def command(self):
        cmd = [self.binary, "serve", "--model", self.model, "--port", "0"]
        if self.threads and "--threads" not in self.args:
            cmd += ["--threads", str(self.threads)]
        return cmd + self.args

    def start(self, timeout=60):
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=self.env, preexec_fn=_die_with_parent)
        threading.Thread(target=self._read_stderr, daemon=True).start()
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # drained, unused
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"tandem serve did not start ({' '.join(self.command())}), "
                                   f"exit {self.proc.returncode}:\n{self.stderr_text()[-4000:]}")
        return self

    def _read_stderr(self):
        for line in self.proc.stderr:
            line = line.rstrip(b"\n")
            with self._lock:
                self.stderr_lines.append(line)
            m = LISTENING.search(line)
            if m and not self._ready.is_set():
                self.host, self.port = m.group(1).decode(), int(m.group(2))
                self._ready.set()

    def stderr_text(self):
        with self._lock:
            return b"\n".join(self.stderr_lines).decode("utf-8", "replace")

    def access_log(self):
        """The stderr lines that parse as JSON objects (the access log)."""
        out = []
        with self._lock:
            lines = list(self.stderr_lines)
        for line in lines:
            if line.startswith(b"{"):
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
        return out

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Signals the server and returns its exit status (killing it if it does not exit)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------------------------------------
# Raw HTTP


class Reply:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"Reply({self.status}, {self.body[:300]!r})"


def request(port, method, path, body=None, headers=None, host="127.0.0.1", timeout=60):
    """One request on a fresh connection; body may be a dict (sent as JSON), str or bytes."""
    hdrs = dict(headers or {})
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    elif isinstance(body, str):
        body = body.encode()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        return Reply(r.status, r.getheaders(), r.read())
    finally:
        conn.close()


def post(port, path, body, **kw):
    return request(port, "POST", path, body, **kw)


def raw_exchange(port, data, shutdown_write=False, timeout=30, host="127.0.0.1"):
    """Sends bytes as they are and parses one HTTP response. Returns a Reply, or None when the
    server closed the connection without answering (acceptable only for unparseable input)."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        try:
            s.sendall(data)
            if shutdown_write:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before reading everything
        r = http.client.HTTPResponse(s, method="POST")
        try:
            r.begin()
            return Reply(r.status, r.getheaders(), r.read())
        except (http.client.RemoteDisconnected, ConnectionResetError, http.client.IncompleteRead):
            return None


def raw_request_bytes(method, path, body=b"", headers=None, port=0, content_length=None):
    hdrs = {"Host": f"127.0.0.1:{port}", "Connection": "close"}
    hdrs.update(headers or {})
    if body is not None and "Transfer-Encoding" not in hdrs:
        hdrs["Content-Length"] = str(len(body) if content_length is None else content_length)
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    return head.encode("latin-1") + b"\r\n" + (body or b"")


def chunked(body, sizes):
    """body in HTTP/1.1 chunked transfer coding, split at the given chunk sizes (then the rest)."""
    out, i = b"", 0
    for n in list(sizes) + [len(body)]:
        part = body[i:i + n]
        if part:
            out += b"%x\r\n" % len(part) + part + b"\r\n"
        i += n
        if i >= len(body):
            break
    return out + b"0\r\n\r\n"


# ---------------------------------------------------------------------------------------------
# Server-sent events


def parse_sse(body):
    """Strict parse of an SSE body per the contract: `data: X\\n\\n` events, the last `[DONE]`.
    Returns the decoded JSON chunks; raises AssertionError naming the first framing error."""
    text = body.decode("utf-8")  # strict: a split character would fail here
    assert text.endswith("data: [DONE]\n\n"), f"stream does not end with [DONE]: {text[-200:]!r}"
    events = text.split("\n\n")
    assert events[-1] == "", repr(text[-100:])
    events = events[:-1]
    chunks = []
    for i, ev in enumerate(events):
        assert ev.startswith("data: ") and "\n" not in ev, f"event {i} is not one data line: {ev!r}"
        payload = ev[len("data: "):]
        if i == len(events) - 1:
            assert payload == "[DONE]"
        else:
            assert payload != "[DONE]", "[DONE] before the last event"
            chunks.append(json.loads(payload))
    return chunks


def stream_text(chunks, chat):
    """Concatenated text of choice 0 over the chunks."""
    out = []
    for c in chunks:
        for ch in c.get("choices", []):
            if ch.get("index", 0) != 0:
                continue
            if chat:
                out.append((ch.get("delta") or {}).get("content") or "")
            else:
                out.append(ch.get("text") or "")
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Prometheus text format 0.0.4

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)')


def parse_prometheus(text):
    """Strict parse: returns (types {family: type}, samples [(name, {label: value}, float)])."""
    types, samples = {}, []
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] == "TYPE":
                assert len(parts) == 4, f"line {n}: {line!r}"
                assert parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"), line
                assert parts[2] not in types, f"line {n}: second TYPE for {parts[2]}"
                types[parts[2]] = parts[3]
            continue
        m = _SAMPLE.match(line)
        assert m, f"line {n} is not a sample: {line!r}"
        labels = {}
        if m.group(3):
            rest = m.group(3)
            pos = 0
            while pos < len(rest):
                lm = _LABEL.match(rest, pos)
                assert lm, f"line {n}: bad labels {rest!r}"
                labels[lm.group(1)] = lm.group(2)
                pos = lm.end()
        value = float(m.group(4))  # accepts NaN, +Inf, -Inf as the format does
        samples.append((m.group(1), labels, value))
    return types, samples


class Metrics:
    def __init__(self, text):
        self.text = text
        self.types, self.samples = parse_prometheus(text)

    def get(self, name, **labels):
        """Sum of the samples of name whose labels include the given ones (0 when absent)."""
        return sum(v for n, l, v in self.samples
                   if n == name and all(l.get(k) == str(x) for k, x in labels.items()))

    def has(self, name):
        return any(n == name for n, _, _ in self.samples)


def scrape(port):
    r = request(port, "GET", "/metrics")
    assert r.status == 200, r
    return Metrics(r.body.decode("utf-8"))


def wait_for(predicate, timeout=20.0, what="condition"):
    """Polls predicate until it returns a truthy value; fails the test after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


# ---------------------------------------------------------------------------------------------
# Reference outputs


def generate_batch(binary, requests, args=(), model=MODEL):
    """Runs `tandem generate --prompts` on a list of request dicts (prompt/prompt_ids, max_tokens,
    chat, ...) with --max-num-seqs 1, so that each runs alone. Returns the result dicts in order."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for r in requests:
            f.write(json.dumps(r) + "\n")
        path = f.name
    try:
        p = subprocess.run([binary, "generate", "--model", model, "--prompts", path,
                            "--max-num-seqs", "1", "--threads", "1", *args],
                           capture_output=True, timeout=300)
        assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
        out = [json.loads(l) for l in p.stdout.decode().splitlines() if l.startswith("{")]
        out = [o for o in out if "index" in o]
        assert len(out) == len(requests), p.stdout[-2000:]
        return sorted(out, key=lambda o: o["index"])
    finally:
        os.unlink(path)


def tokenize(binary, texts, model=MODEL):
    """`tandem tokenize`: the ids of each string (no special-token handling beyond the CLI's)."""
    inp = "".join(json.dumps(t) + "\n" for t in texts)
    p = subprocess.run([binary, "tokenize", "--model", model], input=inp.encode(),
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [json.loads(l) for l in p.stdout.decode().splitlines() if l.strip()]


def chat_template_ids(binary, messages, tools=None, model=MODEL):
    with tempfile.TemporaryDirectory() as d:
        mp = os.path.join(d, "m.json")
        with open(mp, "w") as f:
            json.dump(messages, f)
        cmd = [binary, "chat-template", "--model", model, "--messages", mp,
               "--add-generation-prompt", "--ids"]
        if tools is not None:
            tp = os.path.join(d, "t.json")
            with open(tp, "w") as f:
                json.dump(tools, f)
            cmd += ["--tools", tp]
        p = subprocess.run(cmd, capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)


# The openai client's calls as the client tests make them: greedy unless told, OPENAI_MAX tokens.
OPENAI_MAX = 24


def client_for(server, api_key="unused"):
    import openai  # (only the client tests need it)

    return openai.OpenAI(base_url=server.url + "/v1", api_key=api_key, max_retries=0, timeout=120)


def chat(client, prompt, **kw):
    kw.setdefault("temperature", 0)
    if "max_completion_tokens" not in kw:
        kw.setdefault("max_tokens", OPENAI_MAX)
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user",
                                                                  "content": prompt}], **kw)


def complete(client, prompt, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", OPENAI_MAX)
    return client.completions.create(model=MODEL, prompt=prompt, **kw)
