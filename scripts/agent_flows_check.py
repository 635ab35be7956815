"""Agent-style multi-turn flows (tool loops, thinking/reasoning in history,
previous_response_id chains, store:false, strict stream event order, usage,
client disconnects) through Steward's Anthropic Messages and OpenAI Responses
APIs with the official clients. Complements scripts/agent_api_check.py.

Usage: agent_flows_check.py ROOT_URL API_KEY   (the default model as "smol")
Prints '<N> passed, <M> failed'; exits non-zero on any failure."""
import http.client
import json
import sys
import time
import urllib.parse
import urllib.request

import anthropic
import openai

root, key = sys.argv[1].rstrip("/"), sys.argv[2]
ac = anthropic.Anthropic(base_url=root, api_key=key, max_retries=0)
# Anthropic's SDK (2.16) has no sampling arguments; Steward still takes
# `temperature` in the body, so greedy decoding goes there.
GREEDY = {"temperature": 0}
oc = openai.OpenAI(base_url=root + "/v1", api_key=key, max_retries=0)
results = []

def check(name, fn):
    try:
        note = fn()
        results.append(True)
        print(f"ok   {name}" + (f": {note}".replace("\n", "\\n")[:200] if isinstance(note, str) else ""))
    except Exception as e:  # noqa: BLE001
        results.append(False)
        print(f"FAIL {name}: {e!r}"[:1500])

def obj(props):
    return {"type": "object", "properties": dict.fromkeys(props, {"type": "string"}), "required": props,
            "additionalProperties": False}

SCHEMAS = {"read_file": obj(["path"]), "get_weather": obj(["city"])}
A_TOOLS = [{"name": n, "description": n, "input_schema": s} for n, s in SCHEMAS.items()]
R_TOOLS = [{"type": "function", "name": n, "description": n, "parameters": s} for n, s in SCHEMAS.items()]
ZIP = {**obj(["zip", "city"]), "additionalProperties": True}
SYS = "You are a coding agent. Use the tools."
TASK = "Read the file notes.txt, then tell me the weather in the city it names."
TWO = "What is the weather in Paris and in Rome?"

def args_ok(name, args):  # a call's arguments: a JSON object with the declared tool's required keys.
    assert name in SCHEMAS, f"undeclared tool {name!r}"
    assert isinstance(args, dict) and set(SCHEMAS[name]["required"]) <= set(args), (name, args)
    assert all(isinstance(args[k], str) for k in SCHEMAS[name]["required"]), args

def tin(u):  # every prompt token: Anthropic's input_tokens exclude the cache reads.
    return u["input_tokens"] + (u.get("cache_read_input_tokens") or 0) + (u.get("cache_creation_input_tokens") or 0)

def norm(b):
    b = b if isinstance(b, dict) else b.model_dump()
    return {k: b[k] for k in ("type", "id", "name", "input", "text", "thinking") if b.get(k) is not None}

def a_stream(req):
    """Stream through the SDK, events checked strictly against Anthropic's spec; content rebuilt from them."""
    evs = [e.model_dump() for e in ac.messages.create(stream=True, **req)]
    t, start = [e["type"] for e in evs], evs[0]["message"]
    assert t[0] == "message_start" and t[-2:] == ["message_delta", "message_stop"], t
    assert t.count("message_stop") == t.count("message_delta") == t.count("message_start") == 1, t
    assert start["content"] == [] and start["stop_reason"] is None and start["role"] == "assistant", start
    content, open_i = [], None
    kinds = {"text": {"text_delta": "text"}, "tool_use": {"input_json_delta": "partial_json"},
             "thinking": {"thinking_delta": "thinking", "signature_delta": None}}
    for e in evs[1:-2]:
        assert e["type"].startswith("content_block_"), f"unexpected event {e['type']} inside the message"
        if e["type"] == "content_block_start":
            assert open_i is None and e["index"] == len(content), ("block start out of order", open_i, e)
            open_i, b = e["index"], norm(e["content_block"])
            assert b["type"] != "tool_use" or (b["input"] == {} and b["id"]), e
            content.append({**b, "partial_json": ""} if b["type"] == "tool_use" else b)
        elif e["type"] == "content_block_delta":
            assert e["index"] == open_i, ("delta for a block not open", open_i, e)
            d, b = e["delta"], content[open_i]
            assert d["type"] in kinds[b["type"]], (b, d)
            if kinds[b["type"]][d["type"]]:
                b[kinds[b["type"]][d["type"]]] += d[kinds[b["type"]][d["type"]]]
        else:
            assert e["type"] == "content_block_stop" and e["index"] == open_i, ("stop for a block not open", open_i, e)
            open_i = None
    assert open_i is None, "a block never stopped"
    assert (d := evs[-2])["delta"]["stop_reason"] in ("end_turn", "max_tokens", "stop_sequence", "tool_use"), d
    assert d["usage"]["output_tokens"] >= 1 and d["usage"]["input_tokens"] is not None, d
    for b in (b for b in content if b["type"] == "tool_use"):
        try:
            b["input"] = json.loads(b.pop("partial_json") or "{}")
        except ValueError:  # a call cut by max_tokens: kept as text
            assert d["delta"]["stop_reason"] == "max_tokens", (b, d)
            b["input"] = "cut"
    return content, d["delta"]["stop_reason"], d["usage"], start["usage"]

def a_turn(msgs, stream, max_tokens=48, **kw):  # one turn; its prompt as served == count_tokens
    req = dict(model="smol", max_tokens=max_tokens, messages=msgs, tools=A_TOOLS, system=SYS, extra_body=GREEDY, **kw)
    n = ac.messages.count_tokens(**{k: v for k, v in req.items() if k not in ("max_tokens", "extra_body")})
    if stream:
        content, stop, usage, first = a_stream(req)
        assert tin(first) == tin(usage), ("message_start and message_delta disagree on the prompt", first, usage)
    else:
        r = ac.messages.create(**req)
        content, stop, usage = [norm(b) for b in r.content], r.stop_reason, r.usage.model_dump()
    assert tin(usage) == n.input_tokens, ("served prompt != count_tokens", usage, n.input_tokens)
    [args_ok(b["name"], b["input"]) for b in content if b["type"] == "tool_use" and b["input"] != "cut"]
    return content, stop, usage, req

def same_as_whole(req, content, stop, usage):  # the request again, whole: same blocks in order, stop, usage
    r = ac.messages.create(**req)
    whole = [{**norm(b), "input": "cut"} if "_raw" in (norm(b).get("input") or {}) else norm(b) for b in r.content]
    assert [{**b, "id": 0} for b in whole] == [{**b, "id": 0} for b in content], ("whole", whole, "streamed", content)
    assert r.stop_reason == stop, (r.stop_reason, stop)
    u = r.usage.model_dump()
    assert tin(u) == tin(usage) and u["output_tokens"] == usage["output_tokens"], (u, usage)

def a_loop():
    msgs = [{"role": "user", "content": TASK}]
    # 1: forced tool, one call, whole; Claude Code sends thinking back with the tool turn.
    c1, stop, u1, _ = a_turn(msgs, False, tool_choice={"type": "tool", "name": "read_file",
                                                       "disable_parallel_tool_use": True})
    uses = [b for b in c1 if b["type"] == "tool_use"]
    assert stop == "tool_use" and [b["name"] for b in uses] == ["read_file"], (stop, c1)
    thinking = {"type": "thinking", "thinking": "I need the file first.", "signature": "c2lnbmF0dXJl"}
    msgs += [{"role": "assistant", "content": [thinking] + c1},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0]["id"],
                                           "content": [{"type": "text", "text": "city: Paris"}]}]}]
    # 2: any tool, streamed, then the same request whole.
    c2, stop, u2, req = a_turn(msgs, True, tool_choice={"type": "any", "disable_parallel_tool_use": True})
    uses2 = [b for b in c2 if b["type"] == "tool_use"]
    assert stop == "tool_use" and len(uses2) == 1 and uses2[0]["id"] != uses[0]["id"], (stop, c2, uses)
    same_as_whole(req, c2, stop, u2)
    assert tin(u2) > tin(u1) + u1["output_tokens"] - 8, ("the history did not reach the prompt", u1, u2)
    msgs += [{"role": "assistant", "content": c2},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses2[0]["id"],
                                           "content": "18 C and sunny"}]}]
    c3, stop, u3, _ = a_turn(msgs, False, max_tokens=16, tool_choice={"type": "none"})  # 3: no tools, whole
    assert all(b["type"] == "text" for b in c3) and stop in ("end_turn", "max_tokens"), (c3, stop)
    msgs += [{"role": "assistant", "content": c3 or "OK."}, {"role": "user", "content": "Thanks. Anything else?"}]
    c4, stop, u4, req = a_turn(msgs, True, max_tokens=16)  # 4: a follow-up, streamed, then whole
    # Free text: greedy decoding is reproducible only up to near-ties (the
    # repeat reuses the cached prompt, computed in other batch shapes), so
    # the repeat is held to the same prompt and block kinds, not the same words.
    r4 = ac.messages.create(**req)
    assert tin(r4.usage.model_dump()) == tin(u4), (r4.usage, u4)
    assert [b.type for b in r4.content] == [b["type"] for b in c4], (r4.content, c4)
    return f"prompts {tin(u1)}→{tin(u2)}→{tin(u3)}→{tin(u4)}, cache read {u4.get('cache_read_input_tokens')}"

def a_parallel():
    ask = [{"role": "user", "content": TWO}]
    c, stop, u, req = a_turn(ask, True, max_tokens=64, tool_choice={"type": "any"})
    uses = [b for b in c if b["type"] == "tool_use"]
    assert uses and stop in ("tool_use", "max_tokens") and len({b["id"] for b in uses}) == len(uses), (stop, c)
    same_as_whole(req, c, stop, u)
    uses = [b for b in uses if b["input"] != "cut"]
    res = [{"type": "tool_result", "tool_use_id": b["id"], "content": f"{i + 10} C"} for i, b in enumerate(uses)]
    res[-1]["is_error"] = True
    follow = ask + [{"role": "assistant", "content": uses}, {"role": "user", "content": res}]
    _, _, u2, _ = a_turn(follow, False, max_tokens=12)
    assert tin(u2) > tin(u), (u, u2)
    return f"{len(uses)} calls, stop {stop}"

TRUNC = dict(model="smol", max_tokens=40, extra_body=GREEDY, messages=[{"role": "user", "content": TWO}],
             tools=[{"name": "get_weather", "description": "Weather for a city", "input_schema": ZIP}],
             tool_choice={"type": "any"})

def same(a, b, what):
    assert a == b, f"{what}: streamed {a}, whole {b}"
    return str(b)

def no_markup(texts):  # the tool-call markup the server prompts for stays out of the text
    assert not any("<tool" in t for t in texts), texts

def a_raw_sse():
    """On the wire: each `event:` name is its data's type; pings only inside the message."""
    body = json.dumps(dict(model="smol", max_tokens=8, stream=True, messages=[{"role": "user", "content": "Hi"}]))
    with urllib.request.urlopen(urllib.request.Request(root + "/v1/messages", data=body.encode(), headers={
            "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"}), timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream"), r.headers
        events = [b.split("\n") for b in r.read().decode().split("\n\n") if b.startswith("event: ")]
    assert all(len(ev) == 2 and json.loads(ev[1][6:])["type"] == ev[0][7:] for ev in events), events
    names = [ev[0][7:] for ev in events]
    assert names[0] == "message_start" and names[-1] == "message_stop" and names.index("ping") > 0, names
    return " ".join(n for n in names if n != "content_block_delta")

R_EVENTS = {"response.content_part.added": ("text", None), "response.content_part.done": ("text", "part"),
            "response.output_text.delta": ("text", "delta"), "response.reasoning_text.delta": ("text", "delta"),
            "response.output_text.done": ("text", "done"), "response.reasoning_text.done": ("text", "done"),
            "response.function_call_arguments.delta": ("args", "delta"),
            "response.function_call_arguments.done": ("args", "done")}

def r_stream(**kw):
    """Stream through the SDK, the events checked strictly against OpenAI's; the final response (== GET)."""
    evs = [e.model_dump() for e in oc.responses.create(stream=True, **kw)]
    t, rid, ends = [e["type"] for e in evs], evs[0]["response"]["id"], ("response.completed", "response.incomplete")
    assert [e["sequence_number"] for e in evs] == list(range(len(evs))), [e["sequence_number"] for e in evs]
    assert t[:2] == ["response.created", "response.in_progress"] and t[-1] in ends, t
    assert sum(x in ends + ("response.failed",) for x in t) == 1, t
    assert [(e["response"]["id"], e["response"]["status"]) for e in evs[:2]] == [(rid, "in_progress")] * 2, evs[:2]
    items, cur = [], None
    for e in evs[2:-1]:
        k = e["type"]
        if k == "response.output_item.added":
            assert cur is None and e["output_index"] == len(items) and e["item"]["id"], ("added out of order", e)
            assert e["item"]["status"] in ("in_progress", None), e
            items.append(cur := {"item": e["item"], "text": "", "args": "", "parts": 0, "done": set()})
            continue
        assert cur is not None and e["output_index"] == len(items) - 1, ("event for an item not open", e)
        iid, kind = cur["item"]["id"], cur["item"]["type"]
        if k == "response.output_item.done":
            assert e["item"]["id"] == iid and e["item"]["type"] == kind, (cur["item"], e)
            cur["final"], cur = e["item"], None
            continue
        assert e["item_id"] == iid, ("item_id differs from the added item's", iid, e)
        if k == "response.content_part.added":
            assert kind in ("message", "reasoning") and not cur["parts"] and e["content_index"] == 0, e
            cur["parts"] += 1
        elif e.get("content_index") is not None:
            assert e["content_index"] == cur["parts"] - 1, ("content_index", cur["parts"], e)
        what, step = R_EVENTS.get(k, (None, None))
        assert what and (what != "args") == (kind != "function_call"), f"unexpected event {k} for a {kind}"
        if step == "delta":
            assert (what == "args" or cur["parts"] == 1) and what not in cur["done"], e
            cur[what] += e["delta"]
        elif step == "done":
            assert e.get("text", e.get("arguments")) == cur[what] and what not in cur["done"], (e, cur[what])
            assert what == "text" or e["name"] == cur["item"]["name"], e
            cur["done"].add(what)
        elif step == "part":
            assert "text" in cur["done"] and e["part"]["text"] == cur["text"], (e, cur)
            cur["done"].add("part")
    assert cur is None, "an item was never done"
    final = evs[-1]["response"]
    assert final["id"] == rid and len(final["output"]) == len(items), (final["output"], items)
    for c, out in zip(items, final["output"]):
        assert out == c["final"], ("output_item.done differs from the final output", out, c["final"])
        fc = out["type"] == "function_call"
        got = out["arguments"] if fc else (out.get("content") or [{}])[0].get("text")
        assert got == c["args" if fc else "text"] and c["done"] == ({"args"} if fc else {"text", "part"}), (out, c)
    r_usage(final)
    got = oc.responses.retrieve(rid).model_dump() if kw.get("store", True) else final
    assert got == final, ("GET differs from response.completed", got, final)
    return final

def r_calls(r):
    out = r["output"] if isinstance(r, dict) else [o.model_dump() for o in r.output]
    calls = [o for o in out if o["type"] == "function_call"]
    [args_ok(c["name"], json.loads(c["arguments"])) for c in calls if c["status"] == "completed"]
    return calls

def r_usage(r):
    u = r["usage"] if isinstance(r, dict) else r.usage.model_dump()
    assert u["total_tokens"] == u["input_tokens"] + u["output_tokens"] and u["output_tokens"] >= 1, u
    return u

def r_loop():
    base = dict(model="smol", tools=R_TOOLS, temperature=0, max_output_tokens=48)
    r1 = oc.responses.create(input=TASK, instructions=SYS + " Turn 1.", parallel_tool_calls=False,
                             tool_choice={"type": "function", "name": "read_file"}, **base)
    c1, u1 = r_calls(r1), r_usage(r1)
    assert [c["name"] for c in c1] == ["read_file"] and r1.status == "completed", r1.output
    r2 = r_stream(previous_response_id=r1.id, instructions="Turn 2.", tool_choice="required",
                  parallel_tool_calls=False, **base,
                  input=[{"type": "function_call_output", "call_id": c1[0]["call_id"], "output": "city: Paris"}])
    c2, u2 = r_calls(r2), r_usage(r2)
    assert len(c2) == 1 and (r2["previous_response_id"], r2["instructions"]) == (r1.id, "Turn 2."), r2
    assert c2[0]["call_id"] != c1[0]["call_id"], "call ids repeat"
    assert u2["input_tokens"] > u1["input_tokens"] + u1["output_tokens"] - 16, (u1, u2)
    out2 = [{"type": "function_call_output", "call_id": c2[0]["call_id"], "output": "18 C and sunny"}]
    short = {**base, "max_output_tokens": 16}
    r3 = oc.responses.create(previous_response_id=r2["id"], tool_choice="none", input=out2, **short)
    assert not r_calls(r3) and r3.instructions is None and r3.status in ("completed", "incomplete") and r_usage(r3), r3
    follow = dict(previous_response_id=r3.id, input="Thanks. Anything else?", **short)
    r4, w4 = r_stream(**follow), oc.responses.create(store=False, **follow)
    u4, w = r_usage(r4), r_usage(w4)
    assert (w["input_tokens"], w["output_tokens"]) == (u4["input_tokens"], u4["output_tokens"]), (u4, w)
    assert w4.output_text == "".join(p["text"] for o in r4["output"] if o["type"] == "message" for p in o["content"])
    items = oc.responses.input_items.list(r4["id"], order="asc", limit=100).data
    kinds = [(i.type, getattr(i, "role", None)) for i in items]
    assert kinds == [("message", "user")] + [("function_call", None), ("function_call_output", None)] * 2 + [
        ("message", "assistant")] * len(r3.output) + [("message", "user")], kinds
    ids = [c1[0]["call_id"], c2[0]["call_id"]]
    assert [items[1].call_id, items[3].call_id] == ids == [items[2].call_id, items[4].call_id], items
    assert items[1].arguments == c1[0]["arguments"] and items[3].arguments == c2[0]["arguments"], items
    return f"inputs {u1['input_tokens']}→{u2['input_tokens']}→{r3.usage.input_tokens}→{u4['input_tokens']}"

def r_chain_instructions():
    """3 deep: each prompt equals the explicit replay of the items with only that turn's instructions."""
    base, long_ins = dict(model="smol", temperature=0, max_output_tokens=8), "Always answer in French. " * 12
    r1 = oc.responses.create(input="My name is Ada.", instructions=long_ins, **base)
    r2 = oc.responses.create(input="What is my name?", instructions="Be terse.", previous_response_id=r1.id, **base)
    r3 = oc.responses.create(input="Say bye.", previous_response_id=r2.id, **base)
    assert (r1.instructions, r2.instructions, r3.instructions) == (long_ins, "Be terse.", None)
    out = lambda r: [o.model_dump(exclude_none=True) for o in r.output]  # noqa: E731
    user = lambda t: {"type": "message", "role": "user", "content": t}  # noqa: E731
    h2 = [user("My name is Ada.")] + out(r1) + [user("What is my name?")]
    p2 = oc.responses.create(input=h2, instructions="Be terse.", store=False, **base).usage.input_tokens
    p3 = oc.responses.create(input=h2 + out(r2) + [user("Say bye.")], store=False, **base).usage.input_tokens
    assert (r2.usage.input_tokens, r3.usage.input_tokens) == (p2, p3), ("prompts differ from the replay", r2.usage,
                                                                        r3.usage, p2, p3)
    return f"{r1.usage.input_tokens}, {p2}, {p3}"

def r_store_false():
    r = r_stream(model="smol", input="Hello there.", max_output_tokens=4, temperature=0, store=False)
    assert r["store"] is False, r
    for i, (f, a) in enumerate([(oc.responses.retrieve, {}), (oc.responses.input_items.list, {}), (
            oc.responses.create, dict(model="smol", input="Go on.", max_output_tokens=4))]):
        try:
            f(**a, **{["response_id", "response_id", "previous_response_id"][i]: r["id"]})
            raise AssertionError("a store:false response was found")
        except openai.NotFoundError as e:
            assert e.status_code == 404 and (i < 2 or e.body.get("param") == "previous_response_id"), e.body

def r_codex_stateless():
    """Codex style: store:false, the whole history (encrypted reasoning, calls, outputs) sent each turn."""
    hist = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": TASK}]},
            {"type": "reasoning", "id": "rs_prev", "summary": [{"type": "summary_text", "text": "Read it first."}],
             "encrypted_content": "gAAAAB-opaque"},
            {"type": "function_call", "call_id": "call_p1", "name": "read_file", "arguments": '{"path": "notes.txt"}'},
            {"type": "function_call_output", "call_id": "call_p1", "output": "city: Paris"}]
    kw = dict(model="smol", tools=R_TOOLS, store=False, tool_choice="required", parallel_tool_calls=False,
              max_output_tokens=48, temperature=0)
    r = r_stream(input=hist, include=["reasoning.encrypted_content"], **kw)
    assert r["status"] == "completed" and len(r_calls(r)) == 1, r["output"]
    return f"prompt {r['usage']['input_tokens']}"

def r_parallel():
    ask = dict(model="smol", input=TWO, tools=R_TOOLS, temperature=0, tool_choice="required", max_output_tokens=64)
    calls = r_calls(r := r_stream(**ask))
    assert calls and len({c["call_id"] for c in calls}) == len(calls), calls
    w = oc.responses.create(store=False, **ask)
    wc = [(c["name"], c["arguments"]) for c in r_calls(w)]
    assert wc == [(c["name"], c["arguments"]) for c in calls] and w.status == r["status"], (wc, calls)
    outs = [{"type": "function_call_output", "call_id": c["call_id"], "output": "18 C"} for c in calls]
    r2 = oc.responses.create(model="smol", previous_response_id=r["id"], input=outs, tools=R_TOOLS,
                             tool_choice="none", max_output_tokens=8, temperature=0)
    items = oc.responses.input_items.list(r2.id, order="asc").data
    got = [i.call_id for i in items if i.type == "function_call_output"]
    assert got == [c["call_id"] for c in calls], (got, calls)
    return f"{len(calls)} calls, {r['status']}"

RTRUNC = dict(model="smol", input=TWO, temperature=0, max_output_tokens=40, tool_choice="required", store=False,
              tools=[{"type": "function", "name": "get_weather", "description": "Weather", "parameters": ZIP}])

def r_items_paging():
    r1 = oc.responses.create(model="smol", input="One.", max_output_tokens=4, temperature=0)
    r2 = oc.responses.create(model="smol", input="Two.", previous_response_id=r1.id, max_output_tokens=4)
    asc, desc, dflt = [[i.id for i in oc.responses.input_items.list(r2.id, **q).data]
                       for q in ({"order": "asc"}, {"order": "desc"}, {})]
    assert len(asc) == 3 and desc == asc[::-1], ("order=desc ignored", asc, desc)
    assert dflt == desc, ("the default order is desc", dflt)
    page = oc.responses.input_items.list(r2.id, order="asc", limit=2)
    assert [i.id for i in page.data] == asc[:2] and page.has_more, ("limit ignored", page)
    after = [i.id for i in oc.responses.input_items.list(r2.id, order="asc", after=asc[0]).data]
    assert after == asc[1:], ("after ignored", after)

def cancelled():
    req = urllib.request.Request(root + "/metrics", headers={"Authorization": f"Bearer {key}"})
    for line in urllib.request.urlopen(req, timeout=30).read().decode().splitlines():
        if line.startswith('steward_requests_cancelled_total{model="smol"}'):
            return float(line.split()[-1])
    raise AssertionError("no steward_requests_cancelled_total for smol")

def disconnect(path, body, headers):
    """POST a streamed request, read a few events, hang up: the server cancels (the counter rises)."""
    before, u = cancelled(), urllib.parse.urlsplit(root)
    (c := http.client.HTTPConnection(u.hostname, u.port, timeout=30)).request(
        "POST", path, json.dumps(body), {"Content-Type": "application/json", **headers})
    r = c.getresponse()
    got = [r.readline() for _ in range(12)]  # about 4 events
    c.close()
    assert r.status == 200 and sum(x.startswith(b"data: ") for x in got) >= 4, (r.status, got)
    for _ in range(40):
        if cancelled() > before:
            return f"cancelled after {sum(x.startswith(b'data: ') for x in got)} events"
        time.sleep(0.25)
    raise AssertionError(f"no cancellation counted (still {before})")

LONG, A_HDR = "Write a very long story about a dragon who learns to cook.", {"anthropic-version": "2023-06-01"}
for name, fn in [
        ("anthropic 4-turn agent loop (forced tool, thinking in history, stream/whole)", a_loop),
        ("anthropic parallel tool calls and their results", a_parallel),
        ("anthropic raw SSE: event names, ping", a_raw_sse),
        ("anthropic block order streamed == whole (truncated calls)", lambda: same(
            [b["type"] for b in a_stream(TRUNC)[0]], [b.type for b in ac.messages.create(**TRUNC).content], "blocks")),
        ("anthropic no tool-call markup in text blocks", lambda: no_markup(
            [b.text for b in ac.messages.create(**TRUNC).content if b.type == "text"])),
        ("responses 4-turn agent loop (previous_response_id, stream/whole)", r_loop),
        ("responses chain 3 deep, instructions not carried over", r_chain_instructions),
        ("responses store:false, then continuation", r_store_false),
        ("responses stateless Codex-style history with reasoning", r_codex_stateless),
        ("responses parallel function calls and their outputs", r_parallel),
        ("responses item order streamed == whole (truncated calls)", lambda: same(
            [o["type"] for o in r_stream(**RTRUNC)["output"]], [o.type for o in oc.responses.create(**RTRUNC).output],
            "items")),
        ("responses no tool-call markup in output_text", lambda:
            no_markup([oc.responses.create(**RTRUNC).output_text])),
        ("responses input_items order/limit/after", r_items_paging),
        ("anthropic client gone mid-stream cancels", lambda: disconnect("/v1/messages", {
            "model": "smol", "stream": True, "max_tokens": 64, "messages": [{"role": "user", "content": LONG}]},
            {"x-api-key": key, **A_HDR})),
        ("responses client gone mid-stream cancels", lambda: disconnect("/v1/responses", {
            "model": "smol", "stream": True, "max_output_tokens": 64, "input": LONG},
            {"Authorization": "Bearer " + key}))]:
    check(name, fn)

print(f"{results.count(True)} passed, {results.count(False)} failed")
sys.exit(0 if all(results) else 1)
