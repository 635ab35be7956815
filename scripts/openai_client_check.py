"""The official OpenAI Python client against Steward, unchanged.

Prints the plain closing line '<N> passed, <M> failed'; exits non-zero on
any failure.
"""
import sys

import openai
from openai import OpenAI

base, key = sys.argv[1], sys.argv[2]
client = OpenAI(base_url=base, api_key=key)
results = []


def check(name, fn):
    try:
        fn()
        results.append(True)
        print(f"ok   {name}")
    except Exception as e:  # noqa: BLE001
        results.append(False)
        print(f"FAIL {name}: {e!r}")


msgs = [{"role": "user", "content": "Name three colors."}]


def non_stream():
    r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=12, temperature=0)
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content, r
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens > 0
    return r.choices[0].message.content


def stream():
    want = non_stream()
    got = []
    usage = None
    with client.chat.completions.create(
        model="smol", messages=msgs, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ) as s:
        for chunk in s:
            if chunk.usage is not None:
                usage = chunk.usage
            if chunk.choices and chunk.choices[0].delta.content:
                got.append(chunk.choices[0].delta.content)
    assert "".join(got) == want, ("".join(got), want)
    assert usage is not None and usage.completion_tokens > 0


def cached_tokens():
    # The same conversation twice: the second reuses the first's prompt
    # state, reported the way OpenAI does.
    long = [{"role": "user", "content": "Describe a lighthouse keeper's day in detail. " * 8}]
    client.chat.completions.create(model="smol", messages=long, max_tokens=4, temperature=0)
    r = client.chat.completions.create(model="smol", messages=long, max_tokens=4, temperature=0)
    cached = r.usage.prompt_tokens_details.cached_tokens
    assert cached == r.usage.prompt_tokens - 1, (cached, r.usage)


def bad_request():
    try:
        client.chat.completions.create(model="smol", messages=msgs, temperature=5)
    except openai.BadRequestError as e:
        assert e.status_code == 400
        return
    raise AssertionError("expected BadRequestError")


def wrong_key():
    bad = OpenAI(base_url=base, api_key="nope", max_retries=0)
    try:
        bad.chat.completions.create(model="smol", messages=msgs, max_tokens=2)
    except openai.AuthenticationError:
        return
    raise AssertionError("expected AuthenticationError")


def models():
    ids = [m.id for m in client.models.list()]
    assert ids == ["smol"], ids


def metrics_parse():
    # /metrics must parse with the reference Prometheus text-format parser
    # and carry the names gateways and dashboards read.
    import urllib.request
    from prometheus_client.parser import text_string_to_metric_families

    req = urllib.request.Request(base.rsplit("/v1", 1)[0] + "/metrics", headers={"Authorization": f"Bearer {key}"})
    text = urllib.request.urlopen(req, timeout=10).read().decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    for want in [
        "steward_requests_running", "steward_requests_waiting", "steward_kv_cells_used",
        "steward_kv_cells_total", "steward_memory_bytes", "steward_cancel_latency_seconds",
        "steward_time_to_first_token_seconds", "steward_request_duration_seconds",
        "steward_queue_wait_seconds", "steward_step_duration_seconds",
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:cache_config_info", "steward_phase", "steward_step_duration_max_seconds",
        "steward_inter_token_latency_seconds", "steward_prefill_duration_seconds", "steward_requests",
        "steward_time_to_first_text_seconds", "steward_drain_seconds", "steward_kv_cells_cached",
        "steward_prefix_cache_lookups", "steward_prefix_cache_hits", "steward_prefix_cache_reused_tokens",
        "steward_prefix_cache_evictions", "steward_prefix_cache_entries", "steward_prompt_tokens",
        "steward_generation_tokens",
    ]:
        assert want in names, (want, sorted(names)[:20])


check("chat non-streaming", non_stream)
check("chat streaming equals non-streaming", stream)
check("usage.prompt_tokens_details.cached_tokens", cached_tokens)
check("400 maps to BadRequestError", bad_request)
check("401 maps to AuthenticationError", wrong_key)
check("models.list", models)
check("/metrics parses (prometheus_client)", metrics_parse)
passed = sum(results)
failed = len(results) - passed
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
