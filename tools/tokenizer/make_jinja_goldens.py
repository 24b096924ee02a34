#!/usr/bin/env python3
"""Makes Jinja interpreter goldens: small templates rendered by transformers' own chat-template
environment (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson).
Covers whitespace control, operators, filters, tests, methods and scoping beyond what the Qwen
templates exercise. Writes tests/fixtures/tokenizer/jinja_goldens.json. Run from the repo root:
    python3 tools/tokenizer/make_jinja_goldens.py
"""
import json
import platform
from pathlib import Path

import jinja2
import transformers
from transformers.utils.chat_template_utils import _compile_jinja_template

ROOT = Path(__file__).resolve().parents[2]
CTX = {"s": "  Hello, World  ", "n": 7, "f": 2.5, "xs": [3, 1, 2], "d": {"b": 1, "a": [1, 2]},
       "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None},
                {"role": "tool", "content": "r"}],
       "u": "naïve café 日本 🙂", "t": True, "z": None, "e": "", "big": 12345678901234}

TEMPLATES = [
    "a\n  {% if t %}\n  yes\n  {% endif %}\nb",
    "a\n  {%+ if t %}x{% endif %}\n",
    "a  {%- if t -%}  x  {%- endif -%}  b",
    "{{- s -}}|{{ s }}|",
    "{# comment #}\nx\n  {#- c2 -#}  y",
    "line\n{% for x in xs %}\n  - {{ x }}\n{% endfor %}\nend\n",
    "{% for x in xs %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.length }}{% endfor %}",
    "{% for x in xs if x > 1 %}{{ x }}{{ loop.first }}{% else %}none{% endfor %}",
    "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}",
    "{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
    "{% for m in msgs %}{{ loop.previtem.role if loop.previtem else '-' }}>{{ m.role }} {% endfor %}",
    "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}",
    "{{ n // 2 }} {{ n / 2 }} {{ n % 3 }} {{ -n // 2 }} {{ n ** 2 }} {{ f * 2 }} {{ n - f }}",
    "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ 10 - 2 - 3 }} {{ 'a' ~ (1 + 2) }}",
    "{{ 'a' ~ 1 + 2 }}",
    "{{ 'a' + 1 }}",
    "{{ missing.attr }}",
    "{{ raise_exception('boom') }}",
    "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 100.0 }} {{ 1/3 }} {{ big * 10 }}",
    "{{ s | trim }}|{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxaxx'.strip('x') }}",
    "{{ s.split(',') }} {{ s.split() }} {{ 'a-b-c'.split('-', 1) }} {{ u.split(' ') | length }}",
    "{{ s.upper() }} {{ s | lower }} {{ 'hello world' | title }} {{ 'hELLO' | capitalize }}",
    "{{ s.startswith('  He') }} {{ s.endswith(('x', '  ')) }} {{ 'abc'.replace('b', 'BB') }}",
    "{{ u | length }} {{ u[0] }} {{ u[-1] }} {{ u[2:5] }} {{ xs[::-1] }} {{ xs[1:] }} {{ xs[-1] }}",
    "{{ xs | sort }} {{ xs | sort(reverse=true) }} {{ xs | max }} {{ xs | min }} {{ xs | sum }}",
    "{{ xs | join(', ') }} {{ xs | first }} {{ xs | last }} {{ xs | reverse | list }} {{ xs | unique | list }}",
    "{{ d | tojson }} {{ d | tojson(indent=2) }} {{ u | tojson }} {{ [1, 2.0, none, true] | tojson }}",
    "{{ {'q': 'a\"b\\\\c\\n\\t'} | tojson }} {{ d | tojson(sort_keys=true) }}",
    "{{ d }} {{ xs }} {{ msgs[1] }} {{ z }} {{ t }} {{ [u, 'it\\'s', \"q\\\"\"] }}",
    "{{ missing }}|{{ missing | default('dflt') }}|{{ e | default('x', true) }}|{{ z | default('y') }}",
    "{{ missing is defined }} {{ z is none }} {{ n is number }} {{ t is boolean }} {{ s is string }}",
    "{{ d is mapping }} {{ xs is iterable }} {{ xs is sequence }} {{ n is odd }} {{ n is divisibleby 7 }}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }} {{ msgs | map(attribute='role') | join(',') }}",
    "{{ msgs | rejectattr('content') | list | length }} {{ xs | select('odd') | list }}",
    "{{ 'a' in 'cat' }} {{ 2 in xs }} {{ 'b' in d }} {{ 'q' not in d }} {{ not t }} {{ t and n }} {{ z or 'alt' }}",
    "{{ 1 < 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ true == 1 }} {{ xs == [3, 1, 2] }} {{ d != {} }}",
    "{% set a = 1 %}{% for x in xs %}{% set a = x %}{% endfor %}{{ a }}",
    "{% set ns = namespace(total=0, seen=[]) %}{% for x in xs %}{% set ns.total = ns.total + x %}{% endfor %}{{ ns.total }}",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', punct='?') }}",
    "{% set block %}in {{ n }} block{% endset %}[{{ block }}]",
    "{% set a, b = [1, 2] %}{{ a }}{{ b }} {{ (1, 2) }} {{ ('solo',) }}",
    "{{ 'x' if t }}|{{ 'x' if z }}|{{ 'a' if z else 'b' if t else 'c' }}",
    "{{ d.get('a') }} {{ d.get('zz', 'def') }} {{ d.keys() | list }} {{ d['b'] }} {{ d.a[1] }}",
    "{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ dict(a=1, b=2) }}",
    "{{ 'abc' | replace('b', '') }} {{ '%s' }} {{ '{{' }} {{ '}}' }} {{ {'k': {'j': 1}} }}",
    "{{ n | string }}{{ f | int }}{{ '42' | int + 1 }}{{ n | float }}{{ -3 | abs }}{{ 2.567 | round(1) }}",
    "{{ 'Hello World Foo' | wordcount }} {{ 'a\nb' | indent(2) }} {{ 'A' is upper }}",
    "{{ xs | length }}{{ e | length }}{{ d | length }}{{ msgs | length }}",
    "{%- for m in msgs -%}\n  {%- if m.content is not none -%}\n    {{ m.role }}: {{ m.content }}\n  {% endif -%}\n{%- endfor -%}",
    "\t{% if t %}\ttab{% endif %}\n   {% for x in xs %}{{x}}{% endfor %}   \n  end",
    "crlf\r\n{% if t %}\r\nx\r\n{% endif %}\r\ny\r\n",
    "{% generation %}gen {{ n }}{% endgeneration %}",
]


def main():
    cases = []
    for src in TEMPLATES:
        try:
            cases.append({"template": src, "rendered": _compile_jinja_template(src).render(**CTX)})
        except Exception as e:  # the interpreter must fail on these too
            cases.append({"template": src, "error": f"{type(e).__name__}: {e}"})
    meta = {"command": "python3 tools/tokenizer/make_jinja_goldens.py",
            "transformers": transformers.__version__, "jinja2": jinja2.__version__,
            "python": platform.python_version(), "count": len(cases)}
    out = ROOT / "tests/fixtures/tokenizer/jinja_goldens.json"
    out.write_text(json.dumps({"meta": meta, "context": CTX, "cases": cases}, ensure_ascii=False,
                              indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main()
