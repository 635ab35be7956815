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
        "steward_generation_tokens", "steward_constraint_seconds", "steward_constraint_tokens",
        "steward_constrained_requests", "steward_prefix_host_spills", "steward_prefix_host_restores",
        "steward_prefix_host_bytes",
    ]:
        assert want in names, (want, sorted(names)[:20])


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
     "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"],
     "additionalProperties": False},
    {"type": "object", "properties": {"colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
     "minItems": 1, "maxItems": 4}}, "required": ["colors"], "additionalProperties": False},
    {"type": "object", "properties": {"book": {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 30}, "year": {"type": "integer"},
        "genre": {"enum": ["fiction", "poetry", "history"]}}, "required": ["title", "year", "genre"],
        "additionalProperties": False}, "in_stock": {"type": "boolean"}},
     "required": ["book", "in_stock"], "additionalProperties": False},
    {"type": "object", "properties": {"points": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
        "required": ["x", "y"], "additionalProperties": False}}, "label": {"type": ["string", "null"], "maxLength": 16}},
     "required": ["points", "label"], "additionalProperties": False},
    {"type": "object", "properties": {"status": {"enum": ["ok", "error"]}, "code": {"type": "integer"},
     "details": {"type": "object", "properties": {"retry": {"type": "boolean"}, "reason": {"type": "string", "maxLength": 20}},
     "required": ["retry"], "additionalProperties": False}}, "required": ["status", "code", "details"],
     "additionalProperties": False},
]
QUESTIONS = ["Describe a person.", "List some colors.", "Tell me about a book.",
             "Give me some points on a plane.", "Report the status of a job."]


def json_schema_50():
    # 50 requests, 5 schemas x 10 seeds, 8 at a time: every reply is JSON
    # that validates against its schema.
    import json
    from concurrent.futures import ThreadPoolExecutor

    import jsonschema

    def one(i):
        k = i % len(SCHEMAS)
        r = client.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": QUESTIONS[k]}], max_tokens=160,
            temperature=0.8, seed=i,
            response_format={"type": "json_schema", "json_schema": {"name": f"s{k}", "schema": SCHEMAS[k], "strict": True}},
        )
        c = r.choices[0]
        assert c.finish_reason == "stop", (i, c.finish_reason, c.message.content)
        jsonschema.validate(json.loads(c.message.content), SCHEMAS[k])

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(one, range(50)))


def json_object():
    import json

    r = client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Give a cat's name and color as a JSON object."}],
        max_tokens=120, temperature=0, response_format={"type": "json_object"},
    )
    assert r.choices[0].finish_reason == "stop", r.choices[0]
    assert isinstance(json.loads(r.choices[0].message.content), dict), r.choices[0].message.content


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                   "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}]


def tool_conversation():
    # Turn 1: a forced call, parsed into the parameters' schema; turn 2: the
    # call and its result go back, and the model answers.
    import json

    import jsonschema

    history = [{"role": "user", "content": "What's the weather in Paris?"}]
    r = client.chat.completions.create(
        model="smol", messages=history, tools=TOOLS, max_tokens=64, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    call = c.message.tool_calls[0]
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), TOOLS[0]["function"]["parameters"])
    # Streamed, the client reassembles the same call.
    got = {}
    with client.chat.completions.create(
        model="smol", messages=history, tools=TOOLS, max_tokens=64, temperature=0, stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    ) as s:
        for chunk in s:
            for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                e = got.setdefault(d.index, {"name": "", "arguments": ""})
                e["name"] += d.function.name or ""
                e["arguments"] += d.function.arguments or ""
    assert got == {0: {"name": "get_weather", "arguments": call.function.arguments}}, got
    history.append(c.message.model_dump(exclude_none=True))
    history.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 18})})
    r2 = client.chat.completions.create(model="smol", messages=history, tools=TOOLS, max_tokens=32,
                                        temperature=0, tool_choice="none")
    assert r2.choices[0].message.content, r2
    assert r2.choices[0].finish_reason in ("stop", "length")


check("chat non-streaming", non_stream)
check("chat streaming equals non-streaming", stream)
check("usage.prompt_tokens_details.cached_tokens", cached_tokens)
check("400 maps to BadRequestError", bad_request)
check("401 maps to AuthenticationError", wrong_key)
check("models.list", models)
check("/metrics parses (prometheus_client)", metrics_parse)
check("json_schema: 50 requests validate", json_schema_50)
check("response_format json_object", json_object)
check("tools: forced call, streamed call, tool result turn", tool_conversation)
passed = sum(results)
failed = len(results) - passed
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
