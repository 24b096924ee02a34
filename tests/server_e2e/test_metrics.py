"""/metrics: strict Prometheus text format 0.0.4, every family the contract names with its type,
histograms well formed, and counters that move by exactly what a request reports: tokens,
successes by finish reason, and on an MTP server drafts, draft tokens, accepted tokens and the
per-position acceptance, from which the mean acceptance length reads off."""

from collections import Counter

import pytest

from support import MODEL, post, request, scrape

GAUGES = ["tandem:num_requests_running", "tandem:num_requests_waiting",
          "tandem:kv_cache_usage_perc", "tandem:gdn_state_usage_perc"]
COUNTERS = ["tandem:prompt_tokens_total", "tandem:generation_tokens_total",
            "tandem:request_success_total", "tandem:num_preemptions_total",
            "tandem:spec_decode_num_drafts_total", "tandem:spec_decode_num_draft_tokens_total",
            "tandem:spec_decode_num_accepted_tokens_total",
            "tandem:spec_decode_num_accepted_tokens_per_pos_total",
            "tandem:request_cancelled_total"]
HISTOGRAMS = ["tandem:time_to_first_token_seconds", "tandem:inter_token_latency_seconds",
              "tandem:e2e_request_latency_seconds"]


def family_of(types, sample):
    """The TYPE family a sample belongs to (counters may be typed with or without _total)."""
    for suffix in ("_bucket", "_sum", "_count", "_total", ""):
        if sample.endswith(suffix):
            base = sample[:len(sample) - len(suffix)] if suffix else sample
            if base in types:
                return base
            if suffix == "_total" and sample in types:
                return sample
    return None


def counter_type(types, name):
    return types.get(name) or types.get(name[:-len("_total")])


def test_exposition_format(server):
    post(server.port, "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 3,
                                          "temperature": 0})
    r = request(server.port, "GET", "/metrics")
    assert r.status == 200
    ctype = r.header("Content-Type")
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype, ctype
    m = scrape(server.port)  # parse_prometheus asserts the syntax line by line
    assert m.text.endswith("\n")
    for name, _, _ in m.samples:
        assert family_of(m.types, name) is not None, f"{name} has no # TYPE line"
    for g in GAUGES:
        assert m.types.get(g) == "gauge", g
        assert m.has(g), g
    for c in COUNTERS:
        assert counter_type(m.types, c) == "counter", c
    for h in HISTOGRAMS:
        assert m.types.get(h) == "histogram", h
        buckets = [(l["le"], v) for n, l, v in m.samples if n == h + "_bucket"]
        assert buckets and buckets[-1][0] == "+Inf", (h, buckets[-3:])
        les = [float(le) for le, _ in buckets]
        assert les == sorted(les)
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), f"{h} buckets not cumulative"
        assert m.get(h + "_count") == counts[-1]
        assert m.get(h + "_sum") >= 0
    assert 0 <= m.get("tandem:kv_cache_usage_perc") <= 1
    assert 0 <= m.get("tandem:gdn_state_usage_perc") <= 1


def test_counters_move_by_what_the_request_reports(server):
    m0 = scrape(server.port)
    j = post(server.port, "/v1/completions", {"model": MODEL, "prompt": "def f(x):",
                                              "max_tokens": 7, "temperature": 0}).json()
    stop = post(server.port, "/v1/completions", {"model": MODEL, "prompt": "def f(x):",
                                                 "max_tokens": 7, "temperature": 0,
                                                 "stop_token_ids": [378]}).json()
    gen = j["usage"]["completion_tokens"] + stop["usage"]["completion_tokens"]
    # The engine thread counts a step before it routes the step's tokens: no lag to wait out.
    m = scrape(server.port)
    d = lambda name, **l: m.get(name, **l) - m0.get(name, **l)  # noqa: E731
    assert d("tandem:e2e_request_latency_seconds_count") == 2
    assert m.get("tandem:num_requests_running") == 0
    assert d("tandem:prompt_tokens_total") == j["usage"]["prompt_tokens"] + \
        stop["usage"]["prompt_tokens"]
    assert d("tandem:generation_tokens_total") == gen
    reasons = Counter(x["choices"][0]["finish_reason"] for x in (j, stop))
    assert "stop" in reasons, "pick stop_token_ids that the greedy text contains"
    for reason, count in reasons.items():
        assert d("tandem:request_success_total", finished_reason=reason) == count, reason
    assert d("tandem:time_to_first_token_seconds_count") == 2
    assert d("tandem:inter_token_latency_seconds_count") >= 6
    assert d("tandem:spec_decode_num_drafts_total") == 0  # plain decoding drafts nothing


def test_speculation_counters_move_on_an_mtp_server(mtp_server):
    m0 = scrape(mtp_server.port)
    js = [post(mtp_server.port, "/v1/completions", {"model": MODEL, "prompt": p,
                                                    "max_tokens": 40, "temperature": 0}).json()
          for p in ("In the beginning God created", "The color of the sky is")]
    steps = sum(j["speculation"]["drafting_steps"] for j in js)
    m = scrape(mtp_server.port)  # counted before the responses were routed
    d = lambda name, **l: m.get(name, **l) - m0.get(name, **l)  # noqa: E731
    drafts = d("tandem:spec_decode_num_drafts_total")
    draft_tokens = d("tandem:spec_decode_num_draft_tokens_total")
    accepted = d("tandem:spec_decode_num_accepted_tokens_total")
    assert drafts > 0, "an MTP server with fixed k=3 drafted nothing"
    assert drafts <= draft_tokens <= 3 * drafts  # k = 3, fewer only near max_tokens
    assert 0 < accepted <= draft_tokens
    assert drafts == steps
    assert draft_tokens == sum(j["speculation"]["draft_tokens"] for j in js)
    assert accepted == sum(j["speculation"]["accepted_tokens"] for j in js)
    per_pos = [d("tandem:spec_decode_num_accepted_tokens_per_pos_total", position=str(i))
               for i in range(3)]
    assert sum(per_pos) == accepted
    assert per_pos == sorted(per_pos, reverse=True)  # position i accepted only after i-1
    assert per_pos[0] <= drafts
    mean = 1 + accepted / drafts
    total_mean = 1 + sum(j["speculation"]["accepted_tokens"] for j in js) / sum(
        j["speculation"]["drafting_steps"] for j in js)
    assert mean == pytest.approx(total_mean)
    assert 1 <= mean <= 4
