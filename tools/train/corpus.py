"""Build tandem's English training corpus from Debian packages.

What: downloads a fixed list of Debian documentation / text packages with `apt-get download`
(the candidate version of the configured archive, recorded with its sha256), unpacks each with
`dpkg-deb -x` into .corpus/pkg/<name>/ (no root install, nothing touches the system), extracts
English prose from each (KJV bible via the `bible` program, fortunes, reStructuredText sources of
the Python and Linux kernel docs, Perl POD, man pages, HTML manuals, plain-text manuals), strips
markup, normalises whitespace and Unicode (NFC), drops non-English / binary / table junk, and
splits documents deterministically into train/validation by a hash of the document id.

Outputs (under .corpus/, gitignored):
  .corpus/train.jsonl, .corpus/val.jsonl   one {"id", "src", "text"} document per line
  models/<name>/corpus_manifest.json       packages, versions, sha256, per-source byte counts

Run (from the repo root, on a Debian bookworm machine with network access to the archive):
  apt-get update
  python3 tools/train/corpus.py --model-dir models/tandem-tiny-qwen35
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import html.parser
import json
import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

# package -> role. Order matters only for the manifest.
PACKAGES = [
    "bible-kjv-text", "bible-kjv", "fortunes-min", "fortunes", "jargon-text", "gnu-standards",
    "python3.11-doc", "linux-doc-6.1", "perl-doc", "manpages", "manpages-dev",
    "debian-handbook", "debian-reference-en", "developers-reference", "maint-guide",
    "abs-guide", "bash-doc",
]
# Per-source caps (characters of cleaned text) keep the technical sources from drowning prose.
CAPS = {"linux-doc": 26_000_000, "python-doc": 12_000_000, "perl-doc": 12_000_000,
        "debian-handbook": 8_000_000}
VAL_PERCENT = 2  # documents with hash % 100 < VAL_PERCENT go to validation
FORTUNE_SKIP = {"ascii-art", "art", "translate-me", "offensive"}


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def read_maybe_gz(p: Path) -> str:
    data = p.read_bytes()
    if p.name.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8", errors="replace")


def fetch_packages(root: Path) -> list[dict]:
    debs = root / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name in PACKAGES:
        pol = sh(["apt-cache", "policy", name])
        m = re.search(r"Candidate:\s*(\S+)", pol)
        if not m or m.group(1) == "(none)":
            raise SystemExit(f"package {name} has no candidate; run apt-get update")
        version = m.group(1)
        existing = [f for f in debs.glob(f"{name}_*.deb")]
        want = None
        for f in existing:
            if sh(["dpkg-deb", "-f", str(f), "Version"]).strip() == version:
                want = f
        if want is None:
            for f in existing:
                f.unlink()
            subprocess.run(["apt-get", "download", f"{name}={version}"], cwd=debs, check=True,
                           capture_output=True)
            want = next(f for f in debs.glob(f"{name}_*.deb")
                        if sh(["dpkg-deb", "-f", str(f), "Version"]).strip() == version)
        dest = root / "pkg" / name
        if not dest.exists():
            dest.mkdir(parents=True)
            subprocess.run(["dpkg-deb", "-x", str(want), str(dest)], check=True)
        manifest.append({"package": name, "version": version, "deb": want.name,
                         "sha256": hashlib.sha256(want.read_bytes()).hexdigest()})
        print(f"  {name} {version}", file=sys.stderr)
    return manifest


# ---------------------------------------------------------------- markup strippers

class _HTMLText(html.parser.HTMLParser):
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "dt", "dd",
             "table", "ul", "ol", "dl", "blockquote", "section", "title", "td", "th"}
    SKIP = {"script", "style", "head", "nav"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.skip, self.pre = [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        if tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.out.append("\n\n" if tag not in ("br", "td", "th", "li", "dd") else "\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP and self.skip:
            self.skip -= 1
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in self.BLOCK:
            self.out.append("\n\n" if tag in ("p", "pre", "div", "table", "ul", "ol", "dl") else "\n")

    def handle_data(self, data):
        if self.skip:
            return
        self.out.append(data if self.pre else re.sub(r"\s+", " ", data))


def strip_html(text: str) -> str:
    p = _HTMLText()
    p.feed(text)
    p.close()
    return "".join(p.out)


_RST_ROLE = re.compile(r":[a-zA-Z0-9_:+.-]+:`([^`]*)`")
_RST_LINKREF = re.compile(r"`([^`<]*?)\s*<[^`>]*>`_{1,2}")


def strip_rst(text: str) -> str:
    out, in_directive = [], False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith(".. ") or s == "..":
            # directive / comment / target: drop the line; keep its indented body only for
            # prose directives (note, warning, ...), drop option lines
            in_directive = not re.match(r"\.\.\s+(note|warning|tip|important|seealso|attention|hint|caution|versionadded|versionchanged|deprecated)::", s)
            body = re.sub(r"^\.\.\s+[a-z-]+::\s*", "", s) if not in_directive else ""
            if body and not s.startswith(".. _") and not s.startswith(".. |"):
                out.append(body)
            continue
        if in_directive:
            if s == "" or line[:1] in " \t":
                if re.match(r"^\s+:[a-z-]+:", line):
                    continue
                if s == "":
                    out.append("")
                    continue
                # indented body of a non-prose directive (code, toctree, ...): keep code blocks
                out.append(line)
                continue
            in_directive = False
        if re.fullmatch(r"([=\-~^\"'`#*+_.:])\1{2,}", s):
            continue  # section underline / overline
        if re.match(r"^\s*:[a-zA-Z -]+:\s", line) and len(s) < 60 and s.count(":") >= 2 and s.startswith(":"):
            line = re.sub(r"^(\s*):([a-zA-Z -]+):", r"\1\2:", line)
        line = _RST_ROLE.sub(r"\1", line)
        line = _RST_LINKREF.sub(r"\1", line)
        line = re.sub(r"``([^`]+)``", r"\1", line)
        line = re.sub(r"`([^`]+)`_{0,2}", r"\1", line)
        line = re.sub(r"\*\*([^*]+)\*\*", r"\1", line)
        line = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\1", line)
        line = line.replace("::", ":") if line.rstrip().endswith("::") else line
        line = re.sub(r"\|([A-Za-z0-9_ -]+)\|", r"\1", line)
        out.append(line)
    return "\n".join(out)


_POD_CODE = re.compile(r"[A-Z]<<+\s+(.*?)\s+>>+|[A-Z]<([^<>]*)>")
_POD_ESC = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/", "quot": '"', "amp": "&"}


def _pod_inline(s: str) -> str:
    for _ in range(6):
        s = re.sub(r"E<([a-z]+)>", lambda m: _POD_ESC.get(m.group(1), ""), s)
        s = re.sub(r"L<([^<>|]*)\|[^<>]*>", r"\1", s)
        new = _POD_CODE.sub(lambda m: m.group(1) if m.group(1) is not None else m.group(2), s)
        if new == s:
            break
        s = new
    return s


def strip_pod(text: str) -> str:
    out, skip = [], False
    for line in text.splitlines():
        if line.startswith("="):
            cmd, _, rest = line[1:].partition(" ")
            if cmd == "begin":
                skip = True
            elif cmd == "end":
                skip = False
            elif cmd.startswith("head"):
                out += ["", _pod_inline(rest.strip()), ""]
            elif cmd == "item":
                rest = rest.strip()
                out.append(_pod_inline(rest if rest not in ("*", "") else "*"))
            continue
        if not skip:
            out.append(_pod_inline(line))
    return "\n".join(out)


def strip_man(text: str) -> str:
    """Crude groff -man to text: drop requests, keep macro arguments, refill filled text."""
    raw = []
    fill = True
    for line in text.splitlines():
        if line.startswith((".nf", ".EX")):
            fill = False
        elif line.startswith((".fi", ".EE")):
            fill = True
        raw.append((line, fill))
    out = []
    for line, filled in raw:
        if line.startswith(('.\\"', "'\\\"", '.\\}', "'")):
            continue
        if line.startswith("."):
            m = re.match(r"\.([A-Za-z]+)\s*(.*)", line)
            if not m:
                continue
            mac, arg = m.groups()
            if mac in ("SH", "SS"):
                out += ["", arg.strip('"'), ""]
            elif mac in ("B", "I", "SM", "SB"):
                out.append(("\x01" if filled else "") + arg.replace('"', ""))
            elif mac in ("BR", "RB", "IR", "RI", "BI", "IB"):
                parts = re.findall(r'"[^"]*"|\S+', arg)
                out.append(("\x01" if filled else "") + "".join(p.strip('"') for p in parts))
            elif mac in ("PP", "LP", "P", "TP", "IP", "sp", "br", "HP"):
                out.append("")
                if mac == "IP" and arg:
                    first = re.findall(r'"[^"]*"|\S+', arg)
                    if first and first[0].strip('"') not in ("", "\\(bu", "*"):
                        out.append(first[0].strip('"'))
            elif mac in ("TH", "nf", "fi", "RS", "RE", "in", "ft", "ad", "na", "hy", "nh", "ne",
                         "EX", "EE", "UR", "UE", "MT", "ME", "ta", "ti", "ds", "de", "ie", "if",
                         "el", "so", "ce", "tr", "ll", "PD", "TS", "TE", "T&"):
                continue
            else:
                continue
            continue
        out.append(line if not filled else "\x01" + line)
    # refill: consecutive filled lines form one paragraph line
    merged = []
    for line in out:
        if line.startswith("\x01") and merged and merged[-1].startswith("\x01") and line[1:].strip():
            merged[-1] = merged[-1] + " " + line[1:].strip()
        else:
            merged.append(line)
    s = "\n".join(m.lstrip("\x01") if m.startswith("\x01") else m for m in merged)
    s = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", s)
    s = re.sub(r"\\\((em|en)", "\u2014", s)
    s = s.replace("\\(aq", "'").replace("\\(dq", '"').replace("\\(lq", '"').replace("\\(rq", '"')
    s = s.replace("\\(bu", "*").replace("\\(co", "(C)").replace("\\(cq", "'").replace("\\(oq", "'")
    s = re.sub(r"\\\(..", "", s)
    s = re.sub(r"\\\[[^\]]*\]", "", s)
    s = s.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "").replace("\\ ", " ")
    s = s.replace("\\:", "").replace("\\%", "").replace("\\c", "").replace("\\|", "").replace("\\^", "")
    s = re.sub(r"\\[*n]\(?[A-Za-z]{1,2}", "", s)
    s = re.sub(r"\\s[-+]?\d", "", s)
    return s


# ---------------------------------------------------------------- cleaning

def clean(text: str) -> str:
    """Normalise Unicode and whitespace; drop paragraphs that are not English prose or code."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u00a0", " ")
    text = "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch)[0] != "C")
    paras, cur = [], []
    for line in text.split("\n"):
        line = line.expandtabs(4).rstrip()
        if not line.strip():
            if cur:
                paras.append(cur)
                cur = []
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = re.sub(r" {2,}", " ", line.strip())
        cur.append(" " * min(indent, 8) + body)
    if cur:
        paras.append(cur)
    kept = []
    for p in paras:
        s = "\n".join(p)
        n = len(s)
        if n == 0:
            continue
        non_ascii = sum(1 for c in s if ord(c) > 127) / n
        letters = sum(1 for c in s if c.isalpha()) / n
        if non_ascii > 0.03 or letters < 0.4:
            continue
        if re.fullmatch(r"[\W_]+", s):
            continue
        kept.append(s)
    return "\n\n".join(kept).strip()


# ---------------------------------------------------------------- sources

def docs_kjv(root: Path):
    exe = root / "pkg/bible-kjv/usr/bin/bible"
    data = root / "pkg/bible-kjv-text/usr/lib"
    raw = subprocess.run([str(exe), "-f", "-p", str(data), "gen1:1-rev22:21"], check=True,
                         capture_output=True, text=True).stdout
    chapters: dict[str, list[str]] = {}
    order = []
    for line in raw.splitlines():
        m = re.match(r"(\d?[A-Za-z]+)(\d+):(\d+)\s+(.*)", line)
        if not m:
            continue
        key = f"{m.group(1)}{m.group(2)}"
        if key not in chapters:
            chapters[key] = []
            order.append(key)
        chapters[key].append(m.group(4).strip())
    for key in order:
        yield f"kjv/{key}", "kjv", "\n".join(chapters[key])


def docs_fortunes(root: Path):
    for pkg in ("fortunes-min", "fortunes"):
        d = root / "pkg" / pkg / "usr/share/games/fortunes"
        for f in sorted(d.iterdir()):
            if f.suffix in (".dat", ".u8") or f.is_dir() or f.name in FORTUNE_SKIP or f.is_symlink():
                continue
            items = [x.strip("\n") for x in f.read_text("utf-8", errors="replace").split("\n%\n")]
            items = [x for x in items if x.strip()]
            for i in range(0, len(items), 25):  # 25 fortunes per document
                yield f"fortunes/{f.name}/{i}", "fortunes", "\n\n".join(items[i:i + 25])


def docs_plain(root: Path):
    for name, path in [("jargon", "jargon-text/usr/share/doc/jargon-text/jargon.txt.gz"),
                       ("gnu-standards", "gnu-standards/usr/share/doc/gnu-standards/standards.text.gz"),
                       ("gnu-maintain", "gnu-standards/usr/share/doc/gnu-standards/maintain.text.gz")]:
        text = read_maybe_gz(root / "pkg" / path)
        # split long manuals into ~20 KB documents at blank lines
        buf, n, k = [], 0, 0
        for para in text.split("\n\n"):
            buf.append(para)
            n += len(para)
            if n > 20000:
                yield f"{name}/{k}", name, "\n\n".join(buf)
                buf, n, k = [], 0, k + 1
        if buf:
            yield f"{name}/{k}", name, "\n\n".join(buf)


def docs_rst(root: Path):
    py = root / "pkg/python3.11-doc/usr/share/doc/python3.11/html/_sources"
    for f in sorted(py.rglob("*.rst.txt")):
        rel = f.relative_to(py).as_posix()
        if rel.startswith(("whatsnew/changelog",)):
            continue
        yield f"python/{rel}", "python-doc", strip_rst(f.read_text("utf-8", errors="replace"))
    lx = root / "pkg/linux-doc-6.1/usr/share/doc/linux-doc-6.1/Documentation"
    for f in sorted(lx.rglob("*")):
        rel = f.relative_to(lx).as_posix()
        if not f.is_file() or rel.startswith(("translations/", "output/")) or "/zh_" in rel:
            continue
        if not re.search(r"\.(rst|txt)(\.gz)?$", f.name):
            continue
        yield f"linux/{rel}", "linux-doc", strip_rst(read_maybe_gz(f))
    dr = root / "pkg/developers-reference/usr/share/developers-reference/_sources"
    for f in sorted(dr.glob("*.rst.txt")):
        yield f"devref/{f.name}", "developers-reference", strip_rst(f.read_text("utf-8", errors="replace"))


def docs_pod(root: Path):
    d = root / "pkg/perl-doc/usr/share/perl"
    for f in sorted(d.rglob("*")):
        if f.is_file() and re.search(r"\.pod(\.gz)?$", f.name):
            yield f"perl/{f.relative_to(d).as_posix()}", "perl-doc", strip_pod(read_maybe_gz(f))


def docs_man(root: Path):
    for pkg in ("manpages", "manpages-dev"):
        d = root / "pkg" / pkg / "usr/share/man"
        for f in sorted(d.rglob("*.gz")):
            if f.is_symlink():
                continue
            text = read_maybe_gz(f)
            if text.startswith(".so "):
                continue
            yield f"man/{f.relative_to(d).as_posix()}", "manpages", strip_man(text)


def docs_html(root: Path):
    groups = [
        ("debian-handbook", "debian-handbook/usr/share/doc/debian-handbook/html/en-US", "*.html"),
        ("debian-reference", "debian-reference-en/usr/share/debian-reference", "*.en.html"),
        ("maint-guide", "maint-guide/usr/share/doc/maint-guide/html", "*.en.html"),
        ("abs-guide", "abs-guide/usr/share/doc/abs-guide/html", "*.html"),
        ("bash-doc", "bash-doc/usr/share/doc/bash", "*.html"),
    ]
    for src, path, pat in groups:
        d = root / "pkg" / path
        if not d.exists():
            print(f"  warning: {d} missing", file=sys.stderr)
            continue
        for f in sorted(d.rglob(pat)):
            if f.is_file() and not f.is_symlink():
                yield f"{src}/{f.relative_to(d).as_posix()}", src, strip_html(f.read_text("utf-8", errors="replace"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".corpus")
    ap.add_argument("--model-dir", default="models/tandem-tiny-qwen35")
    args = ap.parse_args()
    root = Path(args.root)
    root.mkdir(exist_ok=True)
    print("fetching packages", file=sys.stderr)
    packages = fetch_packages(root)

    used: dict[str, int] = {}
    ndocs: dict[str, int] = {}
    split_bytes = {"train": 0, "val": 0}
    split_docs = {"train": 0, "val": 0}
    all_docs = []
    for gen in (docs_kjv, docs_fortunes, docs_plain, docs_rst, docs_pod, docs_man, docs_html):
        for doc_id, src, raw in gen(root):
            text = clean(raw)
            if len(text) < 200:
                continue
            all_docs.append((doc_id, src, text))
    # per-source caps: keep a hash-ordered (deterministic, unbiased) subset
    all_docs.sort(key=lambda d: hashlib.sha1(d[0].encode()).hexdigest())
    outs = {s: open(root / f"{s}.jsonl", "w", encoding="utf-8") for s in ("train", "val")}
    for doc_id, src, text in all_docs:
        if used.get(src, 0) + len(text) > CAPS.get(src, 1 << 62):
            continue
        used[src] = used.get(src, 0) + len(text)
        ndocs[src] = ndocs.get(src, 0) + 1
        h = int(hashlib.sha1(("split:" + doc_id).encode()).hexdigest(), 16)
        split = "val" if h % 100 < VAL_PERCENT else "train"
        outs[split].write(json.dumps({"id": doc_id, "src": src, "text": text}, ensure_ascii=False) + "\n")
        split_bytes[split] += len(text.encode())
        split_docs[split] += 1
    for f in outs.values():
        f.close()
    manifest = {
        "description": "English text extracted from Debian bookworm packages by tools/train/corpus.py",
        "archive": "Debian bookworm (deb.debian.org), candidate versions at build time",
        "packages": packages,
        "sources": {s: {"chars": used[s], "documents": ndocs[s], "cap_chars": CAPS.get(s)} for s in sorted(used)},
        "split": {"rule": f"sha1('split:'+doc_id) % 100 < {VAL_PERCENT} -> validation",
                  "train_bytes": split_bytes["train"], "val_bytes": split_bytes["val"],
                  "train_docs": split_docs["train"], "val_docs": split_docs["val"]},
        "train_sha256": hashlib.sha256((root / "train.jsonl").read_bytes()).hexdigest(),
        "val_sha256": hashlib.sha256((root / "val.jsonl").read_bytes()).hexdigest(),
    }
    md = Path(args.model_dir)
    md.mkdir(parents=True, exist_ok=True)
    (md / "corpus_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest["sources"], indent=1), file=sys.stderr)
    print(json.dumps(manifest["split"], indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
