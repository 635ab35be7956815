// Steward web chat: streams /v1/chat/completions into a conversation
// kept in this browser (localStorage). Plain DOM, no framework. Model
// text reaches the page only through textContent or StewardMD.render
// (which escapes everything before adding its own tags).
(function () {
  'use strict';

  var LS_CONVS = 'steward.conversations.v1';
  var LS_CURRENT = 'steward.current.v1';
  var LS_SETTINGS = 'steward.settings.v1';
  var LS_KEY = 'steward.apiKey';

  var $ = function (id) { return document.getElementById(id); };
  var els = {};

  // ---------- storage ----------
  function load(key, dflt) {
    try {
      var v = localStorage.getItem(key);
      return v == null ? dflt : JSON.parse(v);
    } catch (e) {
      return dflt;
    }
  }
  function save(key, v, quiet) {
    try {
      localStorage.setItem(key, JSON.stringify(v));
      return true;
    } catch (e) {
      if (!quiet) notice('Could not save to this browser\'s storage: ' + e.message);
      return false;
    }
  }

  var convs = load(LS_CONVS, []);
  if (!Array.isArray(convs)) convs = [];
  var currentId = load(LS_CURRENT, null);
  var settings = load(LS_SETTINGS, {}) || {};
  var models = [];
  // Pictures attached to the next message: [{name, url}] (data: URIs).
  var pending = [];
  var IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/webp', 'image/gif'];
  var MAX_IMAGE_BYTES = 20 * 1024 * 1024; // the server has its own limits too
  var imagesUnsaved = false;
  // The generation in flight: {conv, msg, ctrl, el}.
  var live = null;

  function uid() {
    return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
  }
  function saveConvs() {
    // Pictures can outgrow this browser's storage (a few MB): then they are
    // stored as gone and kept in memory until the page is reloaded.
    if (!save(LS_CONVS, convs, true)) {
      var slim = convs.map(function (c) {
        return Object.assign({}, c, { messages: c.messages.map(function (m) {
          return m.images ? Object.assign({}, m, { images: m.images.map(function () { return null; }) }) : m;
        }) });
      });
      if (save(LS_CONVS, slim) && !imagesUnsaved) {
        imagesUnsaved = true;
        notice('The pictures are too large for this browser\'s storage: they are kept until the page is reloaded.');
      }
    }
    save(LS_CURRENT, currentId);
  }
  function current() {
    for (var i = 0; i < convs.length; i++) if (convs[i].id === currentId) return convs[i];
    return null;
  }
  function newConv() {
    var c = { id: uid(), title: 'New chat', created: Date.now(), updated: Date.now(), messages: [] };
    convs.unshift(c);
    currentId = c.id;
    saveConvs();
    return c;
  }

  function apiKey() {
    return (localStorage.getItem(LS_KEY) || '').trim();
  }
  function headers(json) {
    var h = {};
    if (json) h['Content-Type'] = 'application/json';
    var k = apiKey();
    if (k) h['Authorization'] = 'Bearer ' + k;
    return h;
  }

  // ---------- small DOM helpers ----------
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }
  function notice(text) {
    if (!text) {
      els.notice.classList.add('hidden');
      els.notice.textContent = '';
      return;
    }
    els.notice.textContent = text;
    els.notice.classList.remove('hidden');
  }
  function fmtNum(n, d) {
    return (Math.round(n * Math.pow(10, d)) / Math.pow(10, d)).toFixed(d);
  }

  // ---------- errors as the server words them ----------
  // A non-200 body is {"error":{"message","type","param","code"}}.
  function serverError(status, bodyText) {
    var err = { status: status, message: '', code: null, type: null, param: null };
    try {
      var j = JSON.parse(bodyText);
      var e = j && j.error;
      if (e && typeof e === 'object') {
        err.message = e.message != null ? String(e.message) : '';
        err.code = e.code != null ? String(e.code) : null;
        err.type = e.type != null ? String(e.type) : null;
        err.param = e.param != null ? String(e.param) : null;
      } else if (typeof e === 'string') {
        err.message = e;
      }
    } catch (x) {
      /* not JSON */
    }
    if (!err.message) err.message = bodyText ? bodyText.slice(0, 2000) : 'HTTP ' + status;
    return err;
  }
  function onUnauthorized(err) {
    openSettings(true);
    els.apiKey.focus();
    els.apiKey.select();
    els.apiKey.classList.add('invalid');
    notice('Unauthorized: ' + err.message + ' \u2014 enter the server\'s API key in Settings.');
  }

  // ---------- models ----------
  function loadModels() {
    return fetch('/v1/models', { headers: headers(false) })
      .then(function (r) {
        return r.text().then(function (t) {
          if (!r.ok) {
            var err = serverError(r.status, t);
            if (r.status === 401) onUnauthorized(err);
            else notice('GET /v1/models: ' + err.message + (err.code ? ' (' + err.code + ')' : ''));
            els.modelStatus.textContent = 'models unavailable';
            els.modelStatus.dataset.state = 'error';
            return;
          }
          var j = JSON.parse(t);
          models = (j && j.data) || [];
          fillModels();
          if (els.notice.textContent.indexOf('Unauthorized') === 0 || els.notice.textContent.indexOf('GET /v1/models') === 0) notice('');
        });
      })
      .catch(function (e) {
        notice('GET /v1/models failed: ' + e.message);
      });
  }
  function statusOf(m) {
    var s = m && m.status;
    if (!s) return 'loaded';
    return typeof s === 'string' ? s : s.value || 'loaded';
  }
  function fillModels() {
    var sel = els.model;
    var keep = sel.value || settings.model;
    sel.textContent = '';
    models.forEach(function (m) {
      var st = statusOf(m);
      var o = el('option', null, m.id + (st === 'loaded' ? '' : '  (' + st + ')'));
      o.value = m.id;
      o.dataset.status = st;
      sel.appendChild(o);
    });
    var ids = models.map(function (m) { return m.id; });
    if (keep && ids.indexOf(keep) >= 0) sel.value = keep;
    else {
      var loaded = models.filter(function (m) { return statusOf(m) === 'loaded'; })[0];
      if (loaded) sel.value = loaded.id;
    }
    showModelStatus();
  }
  function selectedModel() {
    return models.filter(function (x) { return x.id === els.model.value; })[0];
  }
  function showModelStatus() {
    var m = selectedModel();
    var st = m ? statusOf(m) : '';
    var label = st;
    if (st === 'unloaded') label = 'unloaded (loads on first request)';
    if (st === 'failed' && m.status && m.status.error) label = 'failed: ' + m.status.error;
    if (m && m.parent) label += ' \u00b7 adapter of ' + m.parent;
    els.modelStatus.textContent = label;
    els.modelStatus.dataset.state = st;
    updateAttach();
  }

  // ---------- images ----------
  // A model with a projector lists "image" in its modalities; none listed
  // means text only.
  function takesImages(m) {
    return !!(m && Array.isArray(m.modalities) && m.modalities.indexOf('image') >= 0);
  }
  function updateAttach() {
    var m = selectedModel();
    var ok = takesImages(m);
    els.attach.disabled = !ok;
    els.attach.title = ok ? 'Attach an image (PNG, JPEG, WebP or GIF; pasting or dropping one works too)'
      : !m ? 'No model to send images to'
      : !m.modalities && statusOf(m) !== 'loaded' ? 'This model is not loaded: whether it takes images shows once it is'
      : 'This model does not take images (it has no projector: --mmproj)';
  }
  function addFiles(files) {
    if (!takesImages(selectedModel())) {
      notice(els.attach.title);
      return;
    }
    Array.prototype.forEach.call(files, function (f) {
      if (IMAGE_TYPES.indexOf(f.type) < 0) {
        notice(f.name + ': not a PNG, JPEG, WebP or GIF image');
        return;
      }
      if (f.size > MAX_IMAGE_BYTES) {
        notice(f.name + ': ' + fmtNum(f.size / 1048576, 1) + ' MiB, over the ' + MAX_IMAGE_BYTES / 1048576 + ' MiB an image may have');
        return;
      }
      var r = new FileReader();
      r.onload = function () {
        pending.push({ name: f.name, url: r.result });
        renderAttachments();
      };
      r.onerror = function () { notice(f.name + ': could not be read'); };
      r.readAsDataURL(f);
    });
  }
  function renderAttachments() {
    var box = els.attachments;
    box.textContent = '';
    box.classList.toggle('hidden', !pending.length);
    pending.forEach(function (a) {
      var d = el('div', 'attachment');
      d.dataset.testid = 'attachment';
      var im = el('img');
      im.src = a.url;
      im.alt = a.name;
      im.title = a.name;
      var x = el('button', 'attachment-remove', '\u00d7');
      x.type = 'button';
      x.title = 'Remove ' + a.name;
      x.setAttribute('aria-label', 'Remove image');
      x.dataset.testid = 'remove-attachment';
      x.addEventListener('click', function () {
        pending.splice(pending.indexOf(a), 1);
        renderAttachments();
        els.prompt.focus();
      });
      d.appendChild(im);
      d.appendChild(x);
      box.appendChild(d);
    });
  }

  // ---------- settings ----------
  function openSettings(open) {
    els.settings.classList.toggle('hidden', !open);
    els.settingsToggle.setAttribute('aria-expanded', open ? 'true' : 'false');
  }
  function readSettings() {
    settings.system = els.system.value;
    settings.temperature = els.temperature.value;
    settings.top_p = els.top_p.value;
    settings.max_tokens = els.max_tokens.value;
    settings.seed = els.seed.value;
    settings.model = els.model.value || settings.model;
    save(LS_SETTINGS, settings);
  }
  function writeSettings() {
    els.system.value = settings.system || '';
    els.temperature.value = settings.temperature || '';
    els.top_p.value = settings.top_p || '';
    els.max_tokens.value = settings.max_tokens || '';
    els.seed.value = settings.seed || '';
    els.apiKey.value = apiKey();
  }
  function num(v, int) {
    if (v === '' || v == null) return undefined;
    var n = int ? parseInt(v, 10) : parseFloat(v);
    return isFinite(n) ? n : undefined;
  }

  // ---------- sidebar ----------
  function renderSidebar() {
    var ul = els.conversations;
    ul.textContent = '';
    convs.forEach(function (c) {
      var li = el('li', 'conv' + (c.id === currentId ? ' active' : ''));
      li.dataset.id = c.id;
      li.dataset.testid = 'conversation';
      var b = el('button', 'conv-title', c.title || 'New chat');
      b.type = 'button';
      b.title = c.title || '';
      b.addEventListener('click', function () { switchTo(c.id); });
      var d = el('button', 'conv-delete', '\u00d7');
      d.type = 'button';
      d.title = 'Delete this conversation';
      d.setAttribute('aria-label', 'Delete conversation');
      d.dataset.testid = 'delete-conversation';
      d.addEventListener('click', function (ev) {
        ev.stopPropagation();
        deleteConv(c.id);
      });
      li.appendChild(b);
      li.appendChild(d);
      ul.appendChild(li);
    });
  }
  function switchTo(id) {
    currentId = id;
    saveConvs();
    renderSidebar();
    renderConversation();
  }
  function deleteConv(id) {
    if (live && live.conv.id === id) live.ctrl.abort();
    convs = convs.filter(function (c) { return c.id !== id; });
    if (currentId === id) currentId = convs.length ? convs[0].id : null;
    if (!currentId) newConv();
    saveConvs();
    renderSidebar();
    renderConversation();
  }

  // ---------- messages ----------
  function renderConversation() {
    var box = els.messages;
    box.textContent = '';
    var c = current();
    if (!c || !c.messages.length) {
      var empty = el('div', 'empty');
      empty.appendChild(el('h2', null, 'Steward'));
      empty.appendChild(el('p', null, 'Ask something. Answers stream from this server; the conversation stays in this browser.'));
      box.appendChild(empty);
      return;
    }
    c.messages.forEach(function (m) {
      var node = m.role === 'user' ? userNode(m) : assistantNode(m);
      box.appendChild(node);
      if (live && live.msg === m) live.el = node;
    });
    box.scrollTop = box.scrollHeight;
  }
  function userNode(m) {
    var d = el('div', 'msg user');
    d.dataset.testid = 'user-message';
    d.appendChild(el('div', 'role', 'You'));
    if (m.images && m.images.length) {
      var imgs = el('div', 'images');
      m.images.forEach(function (url) {
        if (typeof url !== 'string' || url.indexOf('data:image/') !== 0) {
          imgs.appendChild(el('span', 'image-gone', 'picture not kept (too large for this browser\'s storage)'));
          return;
        }
        var im = el('img');
        im.src = url;
        im.alt = 'attached picture';
        im.dataset.testid = 'user-image';
        imgs.appendChild(im);
      });
      d.appendChild(imgs);
    }
    if (m.content || !(m.images && m.images.length)) d.appendChild(el('div', 'content plain', m.content));
    return d;
  }
  function assistantNode(m) {
    var d = el('div', 'msg assistant');
    d.dataset.testid = 'assistant-message';
    d.appendChild(el('div', 'role', m.model || 'Assistant'));
    var det = el('details', 'reasoning hidden');
    det.dataset.testid = 'reasoning';
    var sum = el('summary', null, 'Reasoning');
    det.appendChild(sum);
    det.appendChild(el('div', 'reasoning-body md'));
    d.appendChild(det);
    d.appendChild(el('div', 'toolcalls hidden'));
    var content = el('div', 'content md');
    content.dataset.testid = 'assistant-content';
    d.appendChild(content);
    var err = el('div', 'error hidden');
    err.dataset.testid = 'error';
    err.setAttribute('role', 'alert');
    d.appendChild(err);
    var meta = el('div', 'meta');
    meta.dataset.testid = 'meta';
    d.appendChild(meta);
    fillAssistant(d, m, false);
    return d;
  }
  function fillAssistant(d, m, streaming) {
    d.dataset.state = streaming ? 'streaming' : m.error ? 'error' : m.stopped ? 'stopped' : 'done';
    d.classList.toggle('streaming', !!streaming);

    var det = d.querySelector('.reasoning');
    if (m.reasoning) {
      if (det.classList.contains('hidden')) {
        det.classList.remove('hidden');
        det.open = !!streaming; // open while it streams, folded once done
      }
      det.querySelector('summary').textContent =
        streaming && !m.content ? 'Reasoning\u2026' : 'Reasoning (' + m.reasoning.length + ' chars)';
      det.querySelector('.reasoning-body').innerHTML = window.StewardMD.render(m.reasoning);
      if (!streaming && det.dataset.folded !== '1') {
        det.open = false;
        det.dataset.folded = '1';
      }
    }

    var tc = d.querySelector('.toolcalls');
    var calls = (m.tool_calls || []).filter(Boolean);
    if (calls.length) {
      tc.classList.remove('hidden');
      tc.textContent = '';
      calls.forEach(function (c) {
        var b = el('div', 'toolcall');
        b.dataset.testid = 'toolcall';
        var head = el('div', 'toolcall-head');
        head.appendChild(el('span', 'toolcall-tag', 'tool call'));
        head.appendChild(el('span', 'toolcall-name', (c.function && c.function.name) || '?'));
        if (c.id) head.appendChild(el('span', 'toolcall-id', c.id));
        b.appendChild(head);
        var args = (c.function && c.function.arguments) || '';
        var pretty = args;
        try {
          pretty = JSON.stringify(JSON.parse(args), null, 2);
        } catch (e) {
          /* still arriving, or not JSON: shown as is */
        }
        b.appendChild(el('pre', 'toolcall-args', pretty));
        tc.appendChild(b);
      });
    }

    var content = d.querySelector('.content');
    content.innerHTML = window.StewardMD.render(m.content || '');
    if (streaming) {
      var caret = el('span', 'caret');
      (content.lastElementChild && /^(P|LI)$/.test(content.lastElementChild.tagName)
        ? content.lastElementChild : content).appendChild(caret);
    }

    var err = d.querySelector('.error');
    if (m.error) {
      err.classList.remove('hidden');
      err.textContent = '';
      err.appendChild(el('span', 'error-message', m.error.message));
      var bits = [];
      if (m.error.code) bits.push(m.error.code);
      if (m.error.status) bits.push('HTTP ' + m.error.status);
      if (m.error.param) bits.push('param: ' + m.error.param);
      if (bits.length) err.appendChild(el('span', 'error-code', bits.join(' \u00b7 ')));
    } else {
      err.classList.add('hidden');
    }

    var meta = d.querySelector('.meta');
    meta.textContent = '';
    if (streaming) {
      meta.appendChild(el('span', 'live-dot'));
      meta.appendChild(el('span', null, m.content || m.reasoning || calls.length ? 'streaming\u2026' : 'waiting for the first token\u2026'));
      return;
    }
    if (m.stopped) {
      var s = el('span', 'finish stopped', 'stopped');
      s.dataset.finish = 'stopped';
      meta.appendChild(s);
    } else if (m.finish) {
      var f = el('span', 'finish', 'finish: ' + m.finish);
      f.dataset.finish = m.finish;
      meta.appendChild(f);
    }
    if (m.usage) {
      var u = m.usage;
      meta.appendChild(el('span', 'usage',
        (u.prompt_tokens != null ? u.prompt_tokens + ' prompt + ' : '') +
        (u.completion_tokens != null ? u.completion_tokens : '?') + ' completion tokens' +
        (u.prompt_tokens_details && u.prompt_tokens_details.cached_tokens
          ? ' (' + u.prompt_tokens_details.cached_tokens + ' cached)' : '')));
    }
    if (m.tps) meta.appendChild(el('span', 'tps', fmtNum(m.tps, 1) + ' tok/s'));
    if (m.ttft_ms != null) meta.appendChild(el('span', 'ttft', 'first token ' + fmtNum(m.ttft_ms / 1000, 2) + ' s'));
    if (m.content) {
      var cp = el('button', 'copy-msg', 'Copy');
      cp.type = 'button';
      cp.title = 'Copy the answer as Markdown';
      cp.addEventListener('click', function () { copyText(m.content, cp); });
      meta.appendChild(cp);
    }
  }

  // Throttled repaint of the live message.
  var paintTimer = null;
  var lastSave = 0;
  function paintLive() {
    if (paintTimer) return;
    paintTimer = setTimeout(function () {
      paintTimer = null;
      if (!live) return;
      if (live.el && live.el.isConnected) {
        var box = els.messages;
        var atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
        fillAssistant(live.el, live.msg, true);
        if (atBottom) box.scrollTop = box.scrollHeight;
      }
      if (Date.now() - lastSave > 1000) {
        lastSave = Date.now();
        saveConvs();
      }
    }, 40);
  }

  function copyText(text, btn) {
    function done(ok) {
      var old = btn.textContent;
      btn.textContent = ok ? 'Copied' : 'Copy failed';
      setTimeout(function () { btn.textContent = old === 'Copied' ? 'Copy' : old; }, 1200);
    }
    if (navigator.clipboard && navigator.clipboard.writeText) {
      navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(fallback()); });
    } else {
      done(fallback());
    }
    function fallback() {
      var ta = el('textarea');
      ta.value = text;
      document.body.appendChild(ta);
      ta.select();
      var ok = false;
      try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
      ta.remove();
      return ok;
    }
  }

  // ---------- sending ----------
  function setBusy(busy) {
    els.send.disabled = busy;
    els.stop.classList.toggle('hidden', !busy);
    els.send.classList.toggle('hidden', busy);
    document.body.classList.toggle('busy', busy);
  }

  function buildMessages(c, upto) {
    var out = [];
    var sys = (settings.system || '').trim();
    if (sys) out.push({ role: 'system', content: sys });
    for (var i = 0; i < upto; i++) {
      var m = c.messages[i];
      if (m.role === 'user') out.push({ role: 'user', content: userContent(m) });
      else if (m.role === 'assistant' && !m.error && m.content) out.push({ role: 'assistant', content: m.content });
    }
    return out;
  }

  // A user message with pictures is an OpenAI content array.
  function userContent(m) {
    var imgs = (m.images || []).filter(Boolean);
    if (!imgs.length) return m.content;
    var parts = m.content ? [{ type: 'text', text: m.content }] : [];
    imgs.forEach(function (u) { parts.push({ type: 'image_url', image_url: { url: u } }); });
    return parts;
  }

  function send() {
    if (live) return;
    var text = els.prompt.value;
    var images = pending.map(function (a) { return a.url; });
    if (!text.trim() && !images.length) {
      els.prompt.focus();
      return;
    }
    readSettings();
    notice('');
    var c = current() || newConv();
    if (!c.messages.length || c.title === 'New chat') c.title = text.trim().replace(/\s+/g, ' ').slice(0, 48) || 'Picture';
    var um = { role: 'user', content: text };
    if (images.length) um.images = images;
    c.messages.push(um);
    pending = [];
    renderAttachments();
    var msg = {
      role: 'assistant', content: '', reasoning: '', tool_calls: [],
      model: els.model.value || null, finish: null, usage: null, error: null, stopped: false
    };
    c.messages.push(msg);
    c.updated = Date.now();
    // Most recently used first.
    convs = [c].concat(convs.filter(function (x) { return x !== c; }));
    els.prompt.value = '';
    growPrompt();
    saveConvs();
    renderSidebar();

    var body = {
      messages: buildMessages(c, c.messages.length - 1),
      stream: true,
      stream_options: { include_usage: true }
    };
    if (els.model.value) body.model = els.model.value;
    var t = num(settings.temperature), p = num(settings.top_p), mt = num(settings.max_tokens, true), sd = num(settings.seed, true);
    if (t !== undefined) body.temperature = t;
    if (p !== undefined) body.top_p = p;
    if (mt !== undefined) body.max_tokens = mt;
    if (sd !== undefined) body.seed = sd;

    var ctrl = new AbortController();
    live = { conv: c, msg: msg, ctrl: ctrl, el: null };
    renderConversation();
    setBusy(true);
    fillAssistant(live.el, msg, true);

    var t0 = performance.now();
    var tFirst = null;
    var tLast = null;

    function finish() {
      if (tFirst != null) msg.ttft_ms = tFirst - t0;
      var n = msg.usage && msg.usage.completion_tokens;
      if (n && n > 1 && tFirst != null && tLast != null && tLast > tFirst) {
        msg.tps = (n - 1) / ((tLast - tFirst) / 1000);
      }
      var mine = live;
      live = null;
      setBusy(false);
      c.updated = Date.now();
      saveConvs();
      if (mine && mine.el && mine.el.isConnected) fillAssistant(mine.el, msg, false);
      els.messages.scrollTop = els.messages.scrollHeight;
      // After a 401 the key field keeps the focus.
      if (!(msg.error && msg.error.status === 401)) {
        els.prompt.focus();
        // A model that was unloaded is loaded by now: refresh the statuses.
        loadModels();
      }
    }

    function onChunk(obj) {
      if (obj.error) {
        var e = obj.error;
        msg.error = {
          status: null,
          message: typeof e === 'string' ? e : String(e.message || JSON.stringify(e)),
          code: e.code != null ? String(e.code) : null,
          type: e.type || null,
          param: e.param || null
        };
        return;
      }
      if (obj.usage) msg.usage = obj.usage;
      if (obj.model && !msg.model) msg.model = obj.model;
      var ch = obj.choices && obj.choices[0];
      if (!ch) return;
      var dl = ch.delta || {};
      var got = false;
      if (typeof dl.content === 'string' && dl.content) {
        msg.content += dl.content;
        got = true;
      }
      if (typeof dl.reasoning_content === 'string' && dl.reasoning_content) {
        msg.reasoning += dl.reasoning_content;
        got = true;
      }
      if (Array.isArray(dl.tool_calls)) {
        dl.tool_calls.forEach(function (tc) {
          var i = tc.index != null ? tc.index : msg.tool_calls.length;
          var cur = msg.tool_calls[i] || (msg.tool_calls[i] = { id: '', type: 'function', function: { name: '', arguments: '' } });
          if (tc.id) cur.id = tc.id;
          if (tc.type) cur.type = tc.type;
          if (tc.function) {
            if (tc.function.name) cur.function.name += tc.function.name;
            if (tc.function.arguments) cur.function.arguments += tc.function.arguments;
          }
        });
        got = true;
      }
      if (got) {
        var now = performance.now();
        if (tFirst == null) tFirst = now;
        tLast = now;
      }
      if (ch.finish_reason) msg.finish = ch.finish_reason;
    }

    fetch('/v1/chat/completions', {
      method: 'POST',
      headers: headers(true),
      body: JSON.stringify(body),
      signal: ctrl.signal
    }).then(function (r) {
      if (!r.ok) {
        return r.text().then(function (t) {
          msg.error = serverError(r.status, t);
          if (r.status === 401) onUnauthorized(msg.error);
        });
      }
      var reader = r.body.getReader();
      var dec = new TextDecoder();
      var buf = '';
      var done = false;
      function line(l) {
        if (l.charAt(l.length - 1) === '\r') l = l.slice(0, -1);
        if (l.indexOf('data:') !== 0) return; // event:, id:, comments
        var data = l.slice(5);
        if (data.charAt(0) === ' ') data = data.slice(1);
        if (data === '[DONE]') {
          done = true;
          return;
        }
        try {
          onChunk(JSON.parse(data));
        } catch (e) {
          msg.error = { message: 'unreadable stream line: ' + data.slice(0, 200), code: null };
        }
        paintLive();
      }
      function pump() {
        return reader.read().then(function (res) {
          if (res.done) {
            if (buf) line(buf);
            if (!done && !msg.error && !msg.finish) {
              msg.error = { message: 'the stream ended before [DONE]', code: null };
            }
            return;
          }
          buf += dec.decode(res.value, { stream: true });
          var nl;
          while ((nl = buf.indexOf('\n')) >= 0) {
            line(buf.slice(0, nl));
            buf = buf.slice(nl + 1);
          }
          if (done) {
            reader.cancel().catch(function () {});
            return;
          }
          return pump();
        });
      }
      return pump();
    }).catch(function (e) {
      if (e && e.name === 'AbortError') msg.stopped = true;
      else msg.error = { message: 'request failed: ' + (e && e.message ? e.message : String(e)), code: null };
    }).then(finish);
  }

  function stop() {
    if (live) {
      live.msg.stopped = true;
      live.ctrl.abort();
    }
  }

  function growPrompt() {
    els.prompt.style.height = 'auto';
    els.prompt.style.height = Math.min(200, Math.max(46, els.prompt.scrollHeight + 2)) + 'px';
  }

  // ---------- wiring ----------
  function init() {
    [
      ['newChat', 'new-chat'], ['conversations', 'conversations'], ['model', 'model'],
      ['modelStatus', 'model-status'], ['settingsToggle', 'settings-toggle'], ['settings', 'settings'],
      ['system', 'system'], ['temperature', 'temperature'], ['top_p', 'top_p'], ['max_tokens', 'max_tokens'],
      ['seed', 'seed'], ['apiKey', 'api-key'], ['messages', 'messages'], ['composer', 'composer'],
      ['prompt', 'prompt'], ['send', 'send'], ['stop', 'stop'], ['notice', 'notice'],
      ['attach', 'attach'], ['attachFile', 'attach-file'], ['attachments', 'attachments']
    ].forEach(function (p) { els[p[0]] = $(p[1]); });

    writeSettings();
    if (!current()) {
      if (convs.length) currentId = convs[0].id;
      else newConv();
    }
    // A reload mid-answer leaves an unfinished message: mark it.
    convs.forEach(function (c) {
      c.messages.forEach(function (m) {
        if (m.role === 'assistant' && !m.finish && !m.error && !m.stopped && !m.usage) m.stopped = true;
      });
    });
    renderSidebar();
    renderConversation();

    els.composer.addEventListener('submit', function (e) {
      e.preventDefault();
      send();
    });
    els.prompt.addEventListener('keydown', function (e) {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        send();
      } else if (e.key === 'Escape' && live) {
        stop();
      }
    });
    els.prompt.addEventListener('input', growPrompt);
    els.attach.addEventListener('click', function () { els.attachFile.click(); });
    els.attachFile.addEventListener('change', function () {
      addFiles(els.attachFile.files);
      els.attachFile.value = '';
    });
    els.prompt.addEventListener('paste', function (e) {
      var files = e.clipboardData && e.clipboardData.files;
      if (files && files.length) {
        e.preventDefault();
        addFiles(files);
      }
    });
    els.composer.addEventListener('dragover', function (e) {
      if (e.dataTransfer && Array.prototype.indexOf.call(e.dataTransfer.types, 'Files') >= 0) {
        e.preventDefault();
        els.composer.classList.add('dragging');
      }
    });
    els.composer.addEventListener('dragleave', function (e) {
      if (!els.composer.contains(e.relatedTarget)) els.composer.classList.remove('dragging');
    });
    els.composer.addEventListener('drop', function (e) {
      els.composer.classList.remove('dragging');
      if (e.dataTransfer && e.dataTransfer.files.length) {
        e.preventDefault();
        addFiles(e.dataTransfer.files);
      }
    });
    els.stop.addEventListener('click', stop);
    els.newChat.addEventListener('click', function () {
      var c = current();
      if (c && !c.messages.length) {
        els.prompt.focus();
        return;
      }
      newConv();
      renderSidebar();
      renderConversation();
      els.prompt.focus();
    });
    els.settingsToggle.addEventListener('click', function () {
      openSettings(els.settings.classList.contains('hidden'));
    });
    ['system', 'temperature', 'top_p', 'max_tokens', 'seed'].forEach(function (k) {
      els[k].addEventListener('input', readSettings);
    });
    els.model.addEventListener('change', function () {
      readSettings();
      showModelStatus();
    });
    els.apiKey.addEventListener('change', function () {
      var v = els.apiKey.value.trim();
      if (v) localStorage.setItem(LS_KEY, v);
      else localStorage.removeItem(LS_KEY);
      els.apiKey.classList.remove('invalid');
      loadModels();
    });
    // Copy buttons of code blocks (rendered by md.js).
    els.messages.addEventListener('click', function (e) {
      var b = e.target.closest && e.target.closest('button.copy');
      if (!b) return;
      var code = b.closest('.codeblock').querySelector('code');
      copyText(code ? code.textContent : '', b);
    });
    window.addEventListener('storage', function (e) {
      if (e.key === LS_CONVS && !live) {
        convs = load(LS_CONVS, []);
        if (!current()) currentId = convs.length ? convs[0].id : null;
        if (!currentId) newConv();
        renderSidebar();
        renderConversation();
      }
    });
    loadModels();
    els.prompt.focus();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
