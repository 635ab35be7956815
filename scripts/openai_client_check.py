"""The official OpenAI Python client against Steward, unchanged.

Usage: openai_client_check.py BASE_URL API_KEY [smol|gemma|vision|audio].
`smol` (the default) drives the default model, served as "smol"; `gemma`
drives Gemma 3 270M, a base model without a chat template, served as "gemma"
(Steward's built-in Gemma turns). `vision` and `audio` drive the default
model (as "smol") started with a random-weight projector (scripts/
gen-random-mmproj.py: gemma3 for `vision`, ultravox for `audio`), so the
replies are noise: what is checked is that a PNG made here (zlib + struct)
as a data URI, or a 1 s 16 kHz mono WAV made here (`wave`) as `input_audio`,
goes through the SDK's own request types and comes back as a reply whose
usage counts the picture (`prompt_tokens_details.image_tokens`) or the sound
(`audio_tokens`); `vision` also sends a Responses `input_image`.

Prints the plain closing line '<N> passed, <M> failed'; exits non-zero on
any failure.
"""
import base64
import io
import json
import struct
import sys
import urllib.error
import wave
import urllib.request

from checklib import png

import openai
from openai import OpenAI

base, key = sys.argv[1], sys.argv[2]
profile = sys.argv[3] if len(sys.argv) > 3 else "smol"
client = OpenAI(base_url=base, api_key=key)
results = []


def post(path, body):
    """A JSON POST to a non-SDK endpoint (path from the server root)."""
    req = urllib.request.Request(
        base.rsplit("/v1", 1)[0] + path, data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def streamed_calls(**kw):
    """The tool calls a streamed request's deltas assemble to, and its finish_reason."""
    got, finish = {}, None
    with client.chat.completions.create(stream=True, **kw) as s:
        for chunk in s:
            if not chunk.choices:
                continue
            finish = chunk.choices[0].finish_reason or finish
            for d in chunk.choices[0].delta.tool_calls or []:
                e = got.setdefault(d.index, {"name": "", "arguments": ""})
                e["name"] += d.function.name or ""
                e["arguments"] += d.function.arguments or ""
    return got, finish


def check(name, fn):
    try:
        note = fn()
        results.append(True)
        note = f": {note}".replace("\n", "\\n")[:160] if isinstance(note, str) else ""
        print(f"ok   {name}{note}")
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
        "steward_kv_cells_capacity", "steward_memory_bytes", "steward_cancel_latency_seconds",
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


def template_kwargs():
    # chat_template_kwargs reach the template: one it does not read changes
    # nothing (same render, same greedy reply); a non-object is a 400.
    kw = {"chat_template_kwargs": {"enable_thinking": False, "steward_check": 1}}
    r = client.chat.completions.create(model="smol", messages=msgs, max_tokens=12, temperature=0, extra_body=kw)
    assert r.choices[0].message.content == non_stream(), r.choices[0].message.content
    plain = post("/v1/chat/completions/render", {"model": "smol", "messages": msgs})
    with_kw = post("/v1/chat/completions/render", {"model": "smol", "messages": msgs, **kw})
    assert plain["prompt"] == with_kw["prompt"], (plain, with_kw)
    try:
        client.chat.completions.create(model="smol", messages=msgs, max_tokens=2,
                                       extra_body={"chat_template_kwargs": "x"})
    except openai.BadRequestError:
        return
    raise AssertionError("expected BadRequestError for a non-object chat_template_kwargs")


PREFILL = [{"role": "user", "content": "Name three colors."},
           {"role": "assistant", "content": "The three colors are"}]


def prefill():
    # A final assistant message is continued, not closed: the prompt ends
    # with its text, and the reply is only the continuation.
    rendered = post("/v1/chat/completions/render", {"model": "smol", "messages": PREFILL})["prompt"]
    assert rendered.endswith("The three colors are"), rendered[-80:]
    r = client.chat.completions.create(model="smol", messages=PREFILL, max_tokens=12, temperature=0)
    text = r.choices[0].message.content
    assert text and not text.lstrip().startswith("The three colors"), text
    assert r.choices[0].finish_reason in ("stop", "length"), r.choices[0]
    return f"{PREFILL[1]['content']!r} + {text!r}"


LIGHT = [{"type": "function", "function": {
    "name": "set_light", "description": "Turn a light on or off",
    "parameters": {"type": "object", "properties": {
        "room": {"type": "string", "enum": ["kitchen", "bedroom", "garage"]},
        "state": {"type": "string", "enum": ["on", "off"]}},
        "required": ["room", "state"], "additionalProperties": False}}}]
LIGHT_MSGS = [{"role": "user", "content": "Turn on the kitchen light."}]


def tool_required():
    # tool_choice="required" with one tool: a call to it whose arguments
    # parse and validate; streamed, the deltas assemble to the same call.
    import jsonschema

    kw = dict(model="smol", messages=LIGHT_MSGS, tools=LIGHT, tool_choice="required",
              parallel_tool_calls=False, max_tokens=64, temperature=0)
    r = client.chat.completions.create(**kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    assert c.message.tool_calls and len(c.message.tool_calls) == 1, c.message
    call = c.message.tool_calls[0]
    assert call.function.name == "set_light", call
    jsonschema.validate(json.loads(call.function.arguments), LIGHT[0]["function"]["parameters"])
    got, finish = streamed_calls(**kw)
    assert got == {0: {"name": "set_light", "arguments": call.function.arguments}}, got
    assert finish == "tool_calls", finish
    return f"set_light({call.function.arguments})"


def tool_required_parallel():
    # Parallel calls allowed (the default): every call names the tool and
    # has arguments that parse, and generation ends on its own.
    r = client.chat.completions.create(model="smol", messages=LIGHT_MSGS, tools=LIGHT, tool_choice="required",
                                       max_tokens=200, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", (c.finish_reason, c.message.tool_calls)
    for t in c.message.tool_calls:
        assert t.function.name == "set_light", t
        json.loads(t.function.arguments)


def tokenize_roundtrip(model="smol"):
    t = post("/tokenize", {"model": model, "content": "Hello world"})["tokens"]
    assert t and all(isinstance(x, int) for x in t), t
    back = post("/detokenize", {"model": model, "tokens": t})["content"]
    assert back == "Hello world", (t, back)
    return f"'Hello world' -> {t} -> {back!r}"


# --- Gemma 3 270M: a base model, no template of its own --------------------

G = "gemma"
GMSGS = [{"role": "user", "content": "Name three colors."}]


def g_non_stream():
    r = client.chat.completions.create(model=G, messages=GMSGS, max_tokens=16, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content, r
    assert c.finish_reason in ("stop", "length"), c
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0, r.usage
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, r.usage
    return c.message.content


def g_stream():
    want = g_non_stream()
    got, finish, usage = [], None, None
    with client.chat.completions.create(model=G, messages=GMSGS, max_tokens=16, temperature=0, stream=True,
                                        stream_options={"include_usage": True}) as s:
        for chunk in s:
            usage = chunk.usage or usage
            if chunk.choices:
                finish = chunk.choices[0].finish_reason or finish
                got.append(chunk.choices[0].delta.content or "")
    assert "".join(got) == want, ("".join(got), want)
    assert finish in ("stop", "length"), finish
    assert usage is not None and usage.completion_tokens > 0 and usage.prompt_tokens > 0, usage
    return repr(want)


def g_models():
    ms = list(client.models.list())
    assert [m.id for m in ms] == [G], ms
    tpl = (ms[0].model_extra or {}).get("chat_template") or {}
    assert tpl.get("source") == "fallback gemma", tpl
    ident = (ms[0].model_extra or {}).get("identity") or {}
    assert ident.get("weights_sha256") == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", ident
    p = post("/v1/chat/completions/render", {"model": G, "messages": GMSGS})["prompt"]
    assert p.endswith("<start_of_turn>user\nName three colors.<end_of_turn>\n<start_of_turn>model\n"), p


def g_completions():
    r = client.completions.create(model=G, prompt="The capital of France is", max_tokens=8, temperature=0)
    c = r.choices[0]
    assert c.text and c.finish_reason in ("stop", "length"), c
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0, r.usage
    return f"'The capital of France is' + {c.text!r}"


def g_end_of_turn():
    # The fallback's turn end is an end of generation: forced as the first
    # token, the reply is empty and stops there.
    eot = post("/tokenize", {"model": G, "content": "<end_of_turn>"})["tokens"]
    assert len(eot) == 1, eot
    r = client.chat.completions.create(model=G, messages=GMSGS, max_tokens=8, temperature=0,
                                       logit_bias={str(eot[0]): 100})
    c = r.choices[0]
    assert c.finish_reason == "stop" and c.message.content == "", c
    assert r.usage.completion_tokens == 1, r.usage


# --- media: the default model with a random-weight projector ---------------




def wav(seconds=1.0, rate=16000):
    """A mono 16-bit WAV of a 440 Hz tone, written with the `wave` module."""
    import math

    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / rate)))
                               for i in range(int(seconds * rate))))
    return buf.getvalue()


IMAGE_URI = "data:image/png;base64," + base64.b64encode(png()).decode()
IMAGE_MSGS = [{"role": "user", "content": [
    {"type": "text", "text": "What is in this picture?"},
    {"type": "image_url", "image_url": {"url": IMAGE_URI}}]}]


def extra(details, name):
    """A usage detail the SDK's model may not declare (Steward's image_tokens)."""
    v = getattr(details, name, None)
    return v if v is not None else (details.model_extra or {}).get(name)


def v_models():
    ms = list(client.models.list())
    assert [m.id for m in ms] == ["smol"], ms
    mods = (ms[0].model_extra or {}).get("modalities")
    assert mods == ["text", "image"], mods


def v_image():
    r = client.chat.completions.create(model="smol", messages=IMAGE_MSGS, max_tokens=12, temperature=0)
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content, r
    assert c.finish_reason in ("stop", "length"), c
    images = extra(r.usage.prompt_tokens_details, "image_tokens")
    assert isinstance(images, int) and images > 0, r.usage
    text = client.chat.completions.create(model="smol", max_tokens=1, temperature=0,
                                          messages=[{"role": "user", "content": "What is in this picture?"}])
    assert r.usage.prompt_tokens >= text.usage.prompt_tokens + images, (r.usage, text.usage)
    assert extra(text.usage.prompt_tokens_details, "image_tokens") is None, text.usage
    return f"{images} image tokens of {r.usage.prompt_tokens}; {c.message.content!r}"


def v_image_stream():
    whole = client.chat.completions.create(model="smol", messages=IMAGE_MSGS, max_tokens=12, temperature=0)
    got, finish, usage = [], None, None
    with client.chat.completions.create(model="smol", messages=IMAGE_MSGS, max_tokens=12, temperature=0,
                                        stream=True, stream_options={"include_usage": True}) as s:
        for chunk in s:
            usage = chunk.usage or usage
            if chunk.choices:
                finish = chunk.choices[0].finish_reason or finish
                got.append(chunk.choices[0].delta.content or "")
    assert "".join(got) == whole.choices[0].message.content, ("".join(got), whole.choices[0].message.content)
    assert finish == whole.choices[0].finish_reason, finish
    assert usage is not None and usage.prompt_tokens == whole.usage.prompt_tokens, (usage, whole.usage)
    assert extra(usage.prompt_tokens_details, "image_tokens") == extra(whole.usage.prompt_tokens_details,
                                                                       "image_tokens"), usage


def v_bad_image():
    bad = "data:image/png;base64," + base64.b64encode(png()[:60]).decode()
    try:
        client.chat.completions.create(model="smol", max_tokens=2, messages=[{"role": "user", "content": [
            {"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": bad}}]}])
    except openai.BadRequestError as e:
        assert "messages[0].content[1]" in str(e), e
        return
    raise AssertionError("a truncated PNG was accepted")


def v_responses_image():
    ask = "What is in this picture?"
    r = client.responses.create(model="smol", max_output_tokens=12, temperature=0, input=[
        {"role": "user", "content": [{"type": "input_text", "text": ask},
                                     {"type": "input_image", "image_url": IMAGE_URI, "detail": "auto"}]}])
    assert r.status in ("completed", "incomplete") and r.output_text, r
    text = client.responses.create(model="smol", max_output_tokens=1, temperature=0, input=[
        {"role": "user", "content": [{"type": "input_text", "text": ask}]}])
    assert r.usage.input_tokens > text.usage.input_tokens, (r.usage, text.usage)
    return f"{r.usage.input_tokens} input tokens (text alone: {text.usage.input_tokens}); {r.output_text!r}"


def au_models():
    ms = list(client.models.list())
    mods = (ms[0].model_extra or {}).get("modalities")
    assert mods == ["text", "audio"], mods


def au_audio():
    data = base64.b64encode(wav()).decode()
    r = client.chat.completions.create(model="smol", max_tokens=12, temperature=0, messages=[
        {"role": "user", "content": [{"type": "text", "text": "What do you hear?"},
                                     {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}]}])
    c = r.choices[0]
    assert c.message.role == "assistant" and c.message.content, r
    assert c.finish_reason in ("stop", "length"), c
    d = r.usage.prompt_tokens_details
    assert d.audio_tokens and d.audio_tokens > 0, r.usage
    assert extra(d, "image_tokens") is None, r.usage
    assert r.usage.prompt_tokens > d.audio_tokens, r.usage
    return f"{d.audio_tokens} audio tokens of {r.usage.prompt_tokens}; {c.message.content!r}"


if profile == "vision":
    check("vision: models.list says text and image", v_models)
    check("vision: chat with an image_url data URI, image_tokens", v_image)
    check("vision: streamed equals whole, usage", v_image_stream)
    check("vision: a truncated PNG is a BadRequestError naming the part", v_bad_image)
    check("vision: responses input_image", v_responses_image)
elif profile == "audio":
    check("audio: models.list says text and audio", au_models)
    check("audio: chat with input_audio (wav), audio_tokens", au_audio)
elif profile == "gemma":
    check("gemma: chat non-streaming", g_non_stream)
    check("gemma: chat streaming equals non-streaming, usage", g_stream)
    check("gemma: models.list shows the fallback gemma template", g_models)
    check("gemma: /v1/completions", g_completions)
    check("gemma: <end_of_turn> ends the reply", g_end_of_turn)
    check("gemma: /tokenize then /detokenize round-trips", lambda: tokenize_roundtrip(G))
else:
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
    check("chat_template_kwargs accepted (extra_body)", template_kwargs)
    check("prefill: a final assistant message is continued", prefill)
    check("tool_choice=required: one call, streamed the same", tool_required)
    check("tool_choice=required, parallel calls: all valid", tool_required_parallel)
    check("/tokenize then /detokenize round-trips", tokenize_roundtrip)
passed = sum(results)
failed = len(results) - passed
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
