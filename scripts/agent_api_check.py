"""The official `anthropic` and `openai` Python clients against Steward's
agent APIs, unchanged client code.

Usage: agent_api_check.py ROOT_URL API_KEY PROFILE
  smol   : Anthropic Messages (whole, streamed, tool round trip, stop
           sequences, count_tokens, errors, the SDK's beta tool runner on
           its defaults: a server-side thread refused with the code it falls
           back on, then a two-turn tool run; `cache_control` pinning a
           system prompt, read back, released after the server's
           --pin-max-ttl-s), fields refused in each API's shape, and OpenAI Responses (whole,
           streamed, function-call round trip, previous_response_id, store,
           text.format) on the default model served as "smol".
  vision : Anthropic Messages with an `image` block (a base64 PNG made here
           with zlib + struct): a reply whose usage counts the picture (more
           input tokens than the same request without it, count_tokens
           agreeing), and a truncated PNG refused as BadRequestError naming
           the part; on the default model with a random-weight gemma3
           projector (noise out), served as "smol".
  minilm : embeddings (SDK, float and base64, dimensions) against the
           numpy reference of scripts/embed_reference.py, and rerank (HTTP)
           ordered as the reference orders, on all-MiniLM-L6-v2 as "minilm".

Prints '<N> passed, <M> failed'; exits non-zero on any failure.
"""
import base64
import json
import math
import os
import sys
import time
import urllib.error
import urllib.request

from checklib import png

root, key, profile = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
results = []


def check(name, fn):
    try:
        note = fn()
        results.append(True)
        note = f": {note}".replace("\n", "\\n")[:160] if isinstance(note, str) else ""
        print(f"ok   {name}{note}")
    except Exception as e:  # noqa: BLE001
        results.append(False)
        print(f"FAIL {name}: {e!r}")


def http(method, path, body=None, headers=None):
    """(status, parsed JSON) of a plain HTTP call."""
    h = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    h.update(headers or {})
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(root + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")




def metric(name, model="smol"):
    """A metric's value for `model` in /metrics (None when absent)."""
    req = urllib.request.Request(root + "/metrics", headers={"Authorization": f"Bearer {key}"})
    for line in urllib.request.urlopen(req, timeout=30).read().decode().splitlines():
        head, _, value = line.rpartition(" ")
        if head in (name, f'{name}{{model="{model}"}}'):
            return float(value)
    return None


def prompt_tokens(u):
    """Anthropic's input_tokens exclude the part read from the cache."""
    return u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)


# Anthropic's SDK (2.16) has no sampling arguments; Steward still takes
# `temperature` (and `top_k`) in the body, so greedy decoding goes there.
GREEDY = {"temperature": 0}

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}

if profile == "smol":
    import anthropic
    import openai

    ac = anthropic.Anthropic(base_url=root, api_key=key, max_retries=0)
    oc = openai.OpenAI(base_url=root + "/v1", api_key=key, max_retries=0)
    msg = [{"role": "user", "content": "Name three colours."}]

    def a_whole():
        r = ac.messages.create(model="smol", max_tokens=12, system="Be brief.", messages=msg,
                               extra_body={"temperature": 0, "top_k": 40}, metadata={"user_id": "u1"})
        assert r.type == "message" and r.role == "assistant", r
        assert r.content and r.content[0].type == "text" and r.content[0].text, r.content
        assert r.stop_reason in ("end_turn", "max_tokens"), r.stop_reason
        assert prompt_tokens(r.usage) > 5 and 1 <= r.usage.output_tokens <= 12, r.usage
        assert r.id.startswith("msg_"), r.id
        return r.content[0].text

    def a_stop_sequence():
        base = ac.messages.create(model="smol", max_tokens=16, messages=msg, extra_body=GREEDY)
        words = [w for w in base.content[0].text.split() if len(w) > 2]
        assert len(words) >= 2, base.content[0].text
        stop = words[1]
        r = ac.messages.create(model="smol", max_tokens=16, messages=msg, extra_body=GREEDY,
                               stop_sequences=[stop])
        assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop, (r.stop_reason, r.stop_sequence)
        assert stop not in r.content[0].text, r.content[0].text
        return f"stopped at {stop!r}"

    def a_stream():
        names, text = [], ""
        with ac.messages.stream(model="smol", max_tokens=12, messages=msg, extra_body=GREEDY) as s:
            for ev in s:
                names.append(ev.type)
                if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                    text += ev.delta.text
            final = s.get_final_message()
        raw = [n for n in names if n in ("message_start", "content_block_start", "content_block_delta",
                                         "content_block_stop", "message_delta", "message_stop")]
        assert raw[0] == "message_start" and raw[-1] == "message_stop", raw
        assert raw[-2] == "message_delta" and raw[1] == "content_block_start", raw
        assert raw.index("content_block_stop") > raw.index("content_block_delta"), raw
        whole = ac.messages.create(model="smol", max_tokens=12, messages=msg, extra_body=GREEDY)
        assert final.content[0].text == text == whole.content[0].text, (text, whole.content)
        assert final.usage.output_tokens == whole.usage.output_tokens, (final.usage, whole.usage)
        assert prompt_tokens(final.usage) == prompt_tokens(whole.usage), (final.usage, whole.usage)
        return f"{len(names)} events"

    tools = [{"name": "get_weather", "description": "Weather for a city", "input_schema": WEATHER}]
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]

    def a_tool_round_trip():
        r = ac.messages.create(model="smol", max_tokens=64, messages=ask, tools=tools,
                               tool_choice={"type": "tool", "name": "get_weather"}, extra_body=GREEDY)
        assert r.stop_reason == "tool_use", r
        uses = [b for b in r.content if b.type == "tool_use"]
        assert len(uses) == 1 and uses[0].name == "get_weather", r.content
        assert isinstance(uses[0].input, dict) and isinstance(uses[0].input.get("city"), str), uses[0].input
        follow = ask + [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in r.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                          "content": "18 C and sunny"}]},
        ]
        r2 = ac.messages.create(model="smol", max_tokens=16, messages=follow, tools=tools, extra_body=GREEDY)
        assert r2.type == "message" and r2.content, r2
        # The tool result reached the prompt: it is longer than the first.
        assert prompt_tokens(r2.usage) > prompt_tokens(r.usage), (r.usage, r2.usage)
        return json.dumps(uses[0].input)

    def a_tool_stream():
        with ac.messages.stream(model="smol", max_tokens=64, messages=ask, tools=tools,
                                tool_choice={"type": "any"}, extra_body=GREEDY) as s:
            kinds = [ev.type + ":" + getattr(getattr(ev, "delta", None), "type", "") for ev in s]
            final = s.get_final_message()
        assert "content_block_delta:input_json_delta" in kinds, kinds
        use = [b for b in final.content if b.type == "tool_use"]
        assert use and use[0].name == "get_weather" and "city" in use[0].input, final.content
        assert final.stop_reason == "tool_use", final.stop_reason

    def a_count_tokens():
        n = ac.messages.count_tokens(model="smol", messages=ask, tools=tools, system="Be brief.")
        r = ac.messages.create(model="smol", max_tokens=1, messages=ask, tools=tools, system="Be brief.")
        assert n.input_tokens == prompt_tokens(r.usage) > 0, (n, r.usage)
        bare = ac.messages.count_tokens(model="smol", messages=ask)
        assert bare.input_tokens < n.input_tokens, (bare, n)
        return f"{n.input_tokens} tokens"

    def a_errors():
        try:
            ac.messages.create(model="smol", max_tokens=0, messages=msg)
            raise AssertionError("max_tokens 0 accepted")
        except anthropic.BadRequestError as e:
            assert e.body["type"] == "error" and e.body["error"]["type"] == "invalid_request_error", e.body
        try:
            ac.messages.create(model="nope", max_tokens=4, messages=msg)
            raise AssertionError("unknown model accepted")
        except anthropic.NotFoundError as e:
            assert e.body["error"]["type"] == "not_found_error", e.body
        try:
            anthropic.Anthropic(base_url=root, api_key="wrong", max_retries=0).messages.create(
                model="smol", max_tokens=4, messages=msg)
            raise AssertionError("wrong key accepted")
        except anthropic.AuthenticationError as e:
            assert e.body["error"]["type"] == "authentication_error", e.body
        try:
            ac.messages.create(model="smol", max_tokens=4, messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}])
            raise AssertionError("image accepted")
        except anthropic.BadRequestError as e:
            assert "image" in e.body["error"]["message"], e.body

    def a_tool_runner():
        """`beta.messages.tool_runner` on its defaults, one tool: its first turn asks for a server-side thread
        (`thread`), which Steward refuses with `thread_unsupported_request`; the runner then sends every turn with
        the whole history and no thread: a forced `tool_use`, the tool run, its result sent, a final message. The
        tool is forced on the first turn and `tool_choice` set to `none` for the second (a 135M model), so the
        flow is the same every run; what is checked is the protocol, not the text."""
        sent = []

        def record(resp):
            resp.read()
            sent.append((json.loads(resp.request.content), resp.request.headers.get("anthropic-beta") or "",
                         resp.status_code, resp.json()))

        client = anthropic.Anthropic(base_url=root, api_key=key, max_retries=0,
                                     http_client=anthropic.DefaultHttpxClient(event_hooks={"response": [record]}))
        ran = []

        @anthropic.beta_tool
        def get_weather(city: str) -> str:
            """The current weather in a city.

            Args:
                city: The city's name.
            """
            ran.append(city)
            return "Sunny, 21 degrees Celsius."

        ask1 = [{"role": "user", "content": "What is the weather in Paris?"}]
        runner = client.beta.messages.tool_runner(model="smol", max_tokens=64, tools=[get_weather], messages=ask1,
                                                  tool_choice={"type": "tool", "name": "get_weather"},
                                                  extra_body=GREEDY)
        replies = []
        for m in runner:
            replies.append(m)
            if len(replies) == 1:
                runner.set_messages_params(lambda p: {**p, "tool_choice": {"type": "none"}})
        assert [s[2] for s in sent] == [400, 200, 200], [(s[2], s[3]) for s in sent]
        (b0, beta0, _, e0), (b1, _, _, r1), (b2, _, _, r2) = sent
        assert b0.get("thread") == {"type": "create"} and "message-threads-" in beta0, (b0, beta0)
        assert e0["type"] == "error" and e0["error"]["type"] == "invalid_request_error", e0
        assert e0["error"]["details"] == {"error_code": "thread_unsupported_request"}, e0
        assert "thread" in e0["error"]["message"], e0
        assert "thread" not in b1 and "thread" not in b2, (b1, b2)
        assert b1["messages"] == ask1 and b1["tools"] == b0["tools"], b1
        uses = [c for c in r1["content"] if c["type"] == "tool_use"]
        assert r1["stop_reason"] == "tool_use" and len(uses) == 1 and uses[0]["name"] == "get_weather", r1
        assert ran == [uses[0]["input"]["city"]], (ran, uses)
        history = b2["messages"]
        assert len(history) == 3 and history[0] == ask1[0], history
        assert history[1]["role"] == "assistant" and history[1]["content"][0]["id"] == uses[0]["id"], history
        result = history[2]["content"][0]
        assert history[2]["role"] == "user" and result["type"] == "tool_result", history
        assert result["tool_use_id"] == uses[0]["id"] and "Sunny" in str(result["content"]), result
        assert not any(c["type"] == "tool_use" for c in r2["content"]), r2
        assert r2["stop_reason"] in ("end_turn", "max_tokens"), r2
        assert [m.id for m in replies] == [r1["id"], r2["id"]], replies
        assert runner.until_done().id == r2["id"]
        return f"400 thread_unsupported_request, then tool_use -> get_weather({ran[0]!r}) -> {r2['stop_reason']}"

    def fields_refused():
        """A field that would change the answer is refused naming it, in each API's shape; no generation runs."""
        try:
            ac.beta.messages.create(model="smol", max_tokens=4, messages=msg, thread={"type": "create"})
            raise AssertionError("thread accepted")
        except anthropic.types.ThreadUnsupportedRequestError as e:
            assert e.body["error"]["details"]["error_code"] == "thread_unsupported_request", e.body
        for field, value in [("container", "c"), ("frobnicate", 1)]:
            s, v = http("POST", "/v1/messages", {"model": "smol", "max_tokens": 4, "messages": msg, field: value})
            assert s == 400 and v["type"] == "error" and f"`{field}`" in v["error"]["message"], (s, v)
            assert "details" not in v["error"], v
        for path, body, field, code in [
                ("/v1/chat/completions", {"messages": msg, "modalities": ["text", "audio"]}, "modalities",
                 "unsupported_parameter"),
                ("/v1/completions", {"prompt": "x", "top_logprobs": 2}, "top_logprobs", "unsupported_parameter"),
                ("/v1/responses", {"input": "x", "moderation": {"model": "m"}}, "moderation", None)]:
            s, v = http("POST", path, {"model": "smol", "max_tokens": 4, **body} if "responses" not in path
                        else {"model": "smol", **body})
            assert s == 400 and v["error"]["param"] == field, (path, s, v)
            assert code is None or v["error"]["code"] == code, (path, v)

    # A system prompt of well over 300 tokens, the same in every request of
    # a run and new to the server (its first words differ from run to run).
    rules = f"Session {os.urandom(4).hex()}. " + " ".join(f"Rule {i}: answer in plain words, keep to the question, and never mention "
                     f"the number {i * 7} or the colour of item {i}." for i in range(1, 21))

    def a_cache_control():
        """`cache_control` on a long system prompt: the first request pins it (cache_creation_input_tokens),
        later ones with another question read it (cache_read_input_tokens), whole and streamed; once no request
        uses it for its TTL (the server's --pin-max-ttl-s 3), the pin is gone."""
        created0 = metric("steward_pins_created_total")
        system = [{"type": "text", "text": rules, "cache_control": {"type": "ephemeral"}}]
        ask = lambda q: dict(model="smol", max_tokens=4, system=system, extra_body=GREEDY,  # noqa: E731
                             messages=[{"role": "user", "content": q}])
        r1 = ac.messages.create(**ask("Say hi."))
        u1 = r1.usage
        n = ac.messages.count_tokens(model="smol", system=system, messages=ask("Say hi.")["messages"])
        assert prompt_tokens(u1) == n.input_tokens >= 300, (u1, n)
        assert 0 < u1.cache_creation_input_tokens < prompt_tokens(u1), u1
        assert u1.cache_creation.ephemeral_5m_input_tokens == u1.cache_creation_input_tokens, u1
        assert metric("steward_pins_created_total") > created0
        r2 = ac.messages.create(**ask("Say bye."))
        u2 = r2.usage
        assert u2.cache_read_input_tokens > 0 and u2.cache_creation_input_tokens == 0, u2
        with ac.messages.stream(**ask("Say yes.")) as st:
            u3 = st.get_final_message().usage
        assert u3.cache_read_input_tokens > 0, u3
        try:
            ac.messages.create(**{**ask("x"), "system": [{**system[0], "cache_control": {"type": "ephemeral",
                                                                                         "ttl": "2h"}}]})
            raise AssertionError("ttl 2h accepted")
        except anthropic.BadRequestError as e:
            assert "system[0].cache_control.ttl" in str(e), e
        # OpenAI's prompt_cache_key / prompt_cache_retention pin through chat completions too.
        c = oc.chat.completions.create(model="smol", max_tokens=2, temperature=0, prompt_cache_key="rules",
                                       prompt_cache_retention="24h",
                                       messages=[{"role": "system", "content": rules},
                                                 {"role": "user", "content": "Say hi."}])
        assert c.usage.prompt_tokens_details.cached_tokens > 0, c.usage
        s, v = http("POST", "/v1/chat/completions", {"model": "smol", "max_tokens": 2, "messages": msg,
                                                      "prompt_cache_retention": "1w"})
        assert s == 400 and v["error"]["param"] == "prompt_cache_retention", (s, v)
        # After the TTL (3 s, from the last use) every pin is released; generous deadline.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            expired, held = metric("steward_pins_expired_total"), metric("steward_pinned_prefixes")
            if expired >= 1 and held == 0:
                return (f"pinned {u1.cache_creation_input_tokens} of {prompt_tokens(u1)}, read "
                        f"{u2.cache_read_input_tokens}; {expired:.0f} pins expired")
            time.sleep(0.2)
        raise AssertionError(("pins still held", expired, held))

    def r_whole():
        r = oc.responses.create(model="smol", input="Name three colours.", instructions="Be brief.",
                                max_output_tokens=12, temperature=0)
        assert r.object == "response" and r.status in ("completed", "incomplete"), r
        assert r.output_text and r.usage.input_tokens > 5 and 1 <= r.usage.output_tokens <= 12, r.usage
        assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, r.usage
        return r.output_text

    def r_stream():
        names, seqs, text, done = [], [], "", None
        for ev in oc.responses.create(model="smol", input="Name three colours.", max_output_tokens=12,
                                      temperature=0, stream=True):
            names.append(ev.type)
            seqs.append(ev.sequence_number)
            if ev.type == "response.output_text.delta":
                text += ev.delta
            if ev.type in ("response.completed", "response.incomplete"):
                done = ev.response
        assert names[:2] == ["response.created", "response.in_progress"], names
        assert names[-1] in ("response.completed", "response.incomplete"), names
        for a, b in [("response.output_item.added", "response.content_part.added"),
                     ("response.content_part.added", "response.output_text.delta"),
                     ("response.output_text.delta", "response.output_text.done"),
                     ("response.output_text.done", "response.content_part.done"),
                     ("response.content_part.done", "response.output_item.done")]:
            assert names.index(a) < names.index(b), (a, b, names)
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
        assert done is not None and done.output_text == text, (done, text)
        got = oc.responses.retrieve(done.id)
        assert got.output_text == text, got
        return f"{len(names)} events"

    rtools = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
               "parameters": WEATHER}]

    def r_function_round_trip():
        r = oc.responses.create(model="smol", input="What is the weather in Paris?", tools=rtools,
                                tool_choice={"type": "function", "name": "get_weather"}, temperature=0)
        calls = [o for o in r.output if o.type == "function_call"]
        assert len(calls) == 1 and calls[0].name == "get_weather", r.output
        args = json.loads(calls[0].arguments)
        assert isinstance(args.get("city"), str), args
        r2 = oc.responses.create(model="smol", previous_response_id=r.id, tools=rtools, temperature=0,
                                 max_output_tokens=16,
                                 input=[{"type": "function_call_output", "call_id": calls[0].call_id,
                                         "output": "18 C and sunny"}])
        assert r2.status in ("completed", "incomplete") and r2.previous_response_id == r.id, r2
        assert r2.usage.input_tokens > r.usage.input_tokens, (r.usage, r2.usage)
        items = oc.responses.input_items.list(r2.id)
        kinds = [i.type for i in items.data]
        assert "function_call_output" in kinds and "function_call" in kinds, kinds
        return calls[0].arguments

    def r_previous_response():
        r1 = oc.responses.create(model="smol", input="My name is Ada.", max_output_tokens=8, temperature=0)
        r2 = oc.responses.create(model="smol", input="What is my name?", previous_response_id=r1.id,
                                 max_output_tokens=8, temperature=0)
        alone = oc.responses.create(model="smol", input="What is my name?", max_output_tokens=8,
                                    temperature=0, store=False)
        # The earlier turn, and the reply to it, are in r2's prompt.
        assert r2.usage.input_tokens > alone.usage.input_tokens + r1.usage.output_tokens, (
            r1.usage, r2.usage, alone.usage)
        try:
            oc.responses.retrieve(alone.id)
            raise AssertionError("store=false was stored")
        except openai.NotFoundError:
            pass
        d = oc.responses.delete(r1.id)
        try:
            oc.responses.retrieve(r1.id)
            raise AssertionError("deleted response still there")
        except openai.NotFoundError:
            pass
        try:
            oc.responses.create(model="smol", input="x", previous_response_id=r1.id, max_output_tokens=2)
            raise AssertionError("a deleted previous_response_id was accepted")
        except openai.NotFoundError:
            pass
        return f"deleted: {d}"

    def r_json_schema():
        schema = {"type": "object", "properties": {"colour": {"type": "string"}},
                  "required": ["colour"], "additionalProperties": False}
        r = oc.responses.create(model="smol", input="Give a colour as JSON.", temperature=0,
                                max_output_tokens=40,
                                text={"format": {"type": "json_schema", "name": "c", "schema": schema,
                                                 "strict": True}})
        v = json.loads(r.output_text)
        assert isinstance(v.get("colour"), str) and set(v) == {"colour"}, v
        return r.output_text

    def r_errors():
        # This server has no projector: a picture is refused, naming the part.
        uri = "data:image/png;base64," + base64.b64encode(png()).decode()
        try:
            oc.responses.create(model="smol", input=[{"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "x"}, {"type": "input_image", "image_url": uri}]}])
            raise AssertionError("image accepted")
        except openai.BadRequestError as e:
            assert "content[1]: this model takes no images" in str(e), e
        try:
            oc.responses.create(model="smol", input="x", tools=[{"type": "web_search"}])
            raise AssertionError("web_search accepted")
        except openai.BadRequestError:
            pass

    def not_embedding():
        s, v = http("POST", "/v1/embeddings", {"model": "smol", "input": "x"})
        assert s == 400 and v["error"]["code"] == "model_not_embedding", (s, v)

    for name, fn in [("anthropic whole", a_whole), ("anthropic stop_sequences", a_stop_sequence),
                     ("anthropic stream", a_stream), ("anthropic tool round trip", a_tool_round_trip),
                     ("anthropic tool stream", a_tool_stream), ("anthropic count_tokens", a_count_tokens),
                     ("anthropic errors", a_errors), ("anthropic beta tool_runner, on its defaults", a_tool_runner),
                     ("anthropic cache_control pins a system prompt, released after its TTL", a_cache_control),
                     ("fields that would change the answer refused, each API's shape", fields_refused),
                     ("responses whole", r_whole),
                     ("responses stream", r_stream), ("responses function round trip", r_function_round_trip),
                     ("responses previous_response_id", r_previous_response),
                     ("responses text.format json_schema", r_json_schema), ("responses errors", r_errors),
                     ("embeddings on a generative model", not_embedding)]:
        check(name, fn)

elif profile == "vision":
    import anthropic

    ac = anthropic.Anthropic(base_url=root, api_key=key, max_retries=0)

    def image_block(data):
        return {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                            "data": base64.b64encode(data).decode()}}

    ask = {"type": "text", "text": "What is in this picture?"}
    with_image = [{"role": "user", "content": [image_block(png()), ask]}]
    without = [{"role": "user", "content": [ask]}]

    def v_image():
        r = ac.messages.create(model="smol", max_tokens=12, messages=with_image, extra_body=GREEDY)
        assert r.type == "message" and r.role == "assistant", r
        assert r.content and r.content[0].type == "text" and r.content[0].text, r.content
        assert r.stop_reason in ("end_turn", "max_tokens"), r.stop_reason
        plain = ac.messages.create(model="smol", max_tokens=1, messages=without, extra_body=GREEDY)
        n_img = ac.messages.count_tokens(model="smol", messages=with_image).input_tokens
        n_txt = ac.messages.count_tokens(model="smol", messages=without).input_tokens
        assert prompt_tokens(r.usage) == n_img, (r.usage, n_img)
        assert prompt_tokens(plain.usage) == n_txt, (plain.usage, n_txt)
        assert n_img > n_txt, (n_img, n_txt)
        return f"{n_img} input tokens (text alone: {n_txt}); {r.content[0].text!r}"

    def v_image_stream():
        text = ""
        with ac.messages.stream(model="smol", max_tokens=12, messages=with_image, extra_body=GREEDY) as s:
            for ev in s:
                if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                    text += ev.delta.text
            final = s.get_final_message()
        whole = ac.messages.create(model="smol", max_tokens=12, messages=with_image, extra_body=GREEDY)
        assert final.content[0].text == text == whole.content[0].text, (text, whole.content)
        assert prompt_tokens(final.usage) == prompt_tokens(whole.usage), (final.usage, whole.usage)

    def v_bad_image():
        try:
            ac.messages.create(model="smol", max_tokens=4, messages=[
                {"role": "user", "content": [ask, image_block(png()[:60])]}])
            raise AssertionError("a truncated PNG was accepted")
        except anthropic.BadRequestError as e:
            assert e.body["error"]["type"] == "invalid_request_error", e.body
            m = e.body["error"]["message"]
            assert "messages[0].content[1]" in m, m
            return m

    for name, fn in [("anthropic image block: reply, input_tokens count it", v_image),
                     ("anthropic image block streamed equals whole", v_image_stream),
                     ("anthropic truncated PNG: BadRequestError naming the part", v_bad_image)]:
        check(name, fn)

elif profile == "minilm":
    import openai

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from embed_reference import reference as embed  # noqa: E402

    oc = openai.OpenAI(base_url=root + "/v1", api_key=key, max_retries=0)
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "Ein Mann isst Brot — schnell!", "naïve café résumé 東京",
             " ".join(["The quick brown fox jumps over the lazy dog."] * 20)]
    ref = embed(texts)["embeddings"]

    def cos(a, b):
        return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))

    def e_reference():
        r = oc.embeddings.create(model="minilm", input=texts)  # the SDK asks for base64
        got = [d.embedding for d in r.data]
        cs = [cos(a, b) for a, b in zip(got, ref)]
        assert len(got) == len(texts) and min(cs) >= 0.999, cs
        assert r.usage.prompt_tokens > len(texts), r.usage
        return "cosine min %.5f" % min(cs)

    def e_float_and_dims():
        s, v = http("POST", "/v1/embeddings", {"model": "minilm", "input": texts[0], "encoding_format": "float"})
        assert s == 200 and len(v["data"][0]["embedding"]) == 384, (s, v)
        assert cos(v["data"][0]["embedding"], ref[0]) >= 0.999
        r = oc.embeddings.create(model="minilm", input=texts[:2], dimensions=128)
        e = r.data[0].embedding
        assert len(e) == 128 and abs(math.sqrt(sum(x * x for x in e)) - 1) < 1e-4, len(e)
        s, v = http("POST", "/v1/embeddings", {"model": "minilm", "input": "x", "dimensions": 385})
        assert s == 400 and v["error"]["param"] == "dimensions", (s, v)

    def e_tokens_input():
        s, tok = http("POST", "/tokenize", {"model": "minilm", "content": texts[0], "add_special": True})
        ids = tok["tokens"]
        s, v = http("POST", "/v1/embeddings", {"model": "minilm", "input": [ids], "encoding_format": "float"})
        assert s == 200, (s, v)
        c = cos(v["data"][0]["embedding"], ref[0])
        assert c >= 0.999, c
        return "cosine %.5f" % c

    def e_errors():
        for body, param in [({"model": "minilm", "input": ""}, "input"),
                            ({"model": "minilm", "input": []}, "input"),
                            ({"model": "minilm", "input": "x", "encoding_format": "hex"}, "encoding_format"),
                            ({"model": "minilm", "input": " ".join(["word"] * 900)}, "input")]:
            s, v = http("POST", "/v1/embeddings", body)
            assert s == 400 and v["error"]["param"] == param, (body, s, v)
        s, v = http("POST", "/v1/chat/completions", {"model": "minilm", "messages": [
            {"role": "user", "content": "hi"}]})
        assert s >= 400, (s, v)

    def rr_order():
        query = "What do people eat for breakfast?"
        docs = ["Many people eat eggs and toast in the morning.", "The stock market fell sharply today.",
                "Cereal with milk is a common breakfast.", "Volcanoes erupt molten rock."]
        rv = embed([query] + docs)["embeddings"]
        want = sorted(range(len(docs)), key=lambda i: -cos(rv[0], rv[i + 1]))
        for path in ("/v1/rerank", "/rerank"):
            s, v = http("POST", path, {"model": "minilm", "query": query, "documents": docs,
                                       "return_documents": True})
            assert s == 200, (s, v)
            got = [r["index"] for r in v["results"]]
            assert got == want, (got, want)
            assert v["results"][0]["document"]["text"] == docs[want[0]], v
        s, v = http("POST", "/v1/rerank", {"model": "minilm", "query": query, "documents": docs, "top_n": 2})
        assert [r["index"] for r in v["results"]] == want[:2], v
        return f"order {want}"

    for name, fn in [("embeddings equal the reference", e_reference), ("embeddings float + dimensions", e_float_and_dims),
                     ("embeddings from token ids", e_tokens_input), ("embeddings errors", e_errors),
                     ("rerank orders as the reference", rr_order)]:
        check(name, fn)
else:
    sys.exit(f"unknown profile {profile}")

print(f"{results.count(True)} passed, {results.count(False)} failed")
sys.exit(0 if all(results) else 1)
