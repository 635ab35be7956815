// Steward dashboard: reads GET /dashboard/events (SSE, one `snapshot`
// event per tick) through fetch + ReadableStream, so the API key can ride
// in an Authorization header, and draws each loaded model's requests,
// memory ledger, KV cells, steps, latency histograms and cancellations.
// Plain DOM and hand-drawn <canvas>; no framework.
(function () {
  'use strict';

  var LS_KEY = 'steward.apiKey';
  var INTERVAL_MS = 500;
  var LEDGER_WINDOW = 240; // samples (2 minutes at 500 ms)
  var STEP_WINDOW = 200; // steps
  var CANCEL_WINDOW = 50;

  // Terms that add up to the process's resident memory, bottom to top.
  var TERMS = [
    ['weights', 'weights', '#5b6b8c'],
    ['compute_buffers', 'compute buffers', '#e07a5f'],
    ['live_state', 'live state', '#2f6fed'],
    ['reserved_growth', 'reserved growth', '#8fb0f7'],
    ['cached_prefixes', 'cached prefixes', '#1f9d55'],
    ['window_state', 'window state', '#9b72e6'],
    ['kv_free', 'KV free', '#d5dbe6'],
    ['host_prefixes', 'host prefixes', '#8fd19e'],
    ['checkpoints', 'checkpoints', '#c88a00'],
    ['other', 'other', '#aab0bd']
  ];
  var STEP_TIMES = [
    ['plan_ms', 'plan', '#9b72e6'],
    ['build_ms', 'build', '#e0a800'],
    ['wait_ms', 'wait (runtime)', '#2f6fed'],
    ['out_ms', 'outputs', '#1f9d55']
  ];
  var C_PROMPT = '#e0a800';
  var C_DECODE = '#2f6fed';

  var $ = function (id) { return document.getElementById(id); };
  var perModel = {}; // name -> {card, els, ledger:[], steps:[], cancels:[], lastN, prev}
  var lastEventAt = 0;
  var ctrl = null;
  var retryMs = 1000;
  var blockedOnKey = false;

  // ---------- helpers ----------
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }
  function bytes(n) {
    if (n == null || !isFinite(n)) return '\u2013';
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    var i = 0;
    var v = Math.abs(n);
    while (v >= 1024 && i < u.length - 1) {
      v /= 1024;
      i++;
    }
    return (n < 0 ? '-' : '') + (i === 0 ? String(v) : v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)) + ' ' + u[i];
  }
  function int(n) {
    if (n == null || !isFinite(n)) return '\u2013';
    return Math.round(n).toLocaleString('en-US');
  }
  function secs(s) {
    if (s == null || !isFinite(s)) return '\u2013';
    if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 1 : 0) + ' ms';
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + ' s';
    return Math.floor(s / 60) + 'm ' + Math.round(s % 60) + 's';
  }
  function bucketLabel(b) {
    return b < 1 ? Math.round(b * 1000) + 'ms' : b + 's';
  }
  function apiKey() {
    return (localStorage.getItem(LS_KEY) || '').trim();
  }
  function setStatus(state, text) {
    var s = $('status');
    s.dataset.state = state;
    s.textContent = text;
  }
  function notice(text) {
    var n = $('notice');
    n.textContent = text || '';
    n.classList.toggle('hidden', !text);
  }
  function serverMessage(status, t) {
    try {
      var e = JSON.parse(t).error;
      return e.message + (e.code ? ' (' + e.code + ')' : '');
    } catch (x) {
      return t ? t.slice(0, 500) : 'HTTP ' + status;
    }
  }

  // ---------- the feed ----------
  function connect() {
    if (ctrl) ctrl.abort();
    ctrl = new AbortController();
    var my = ctrl;
    setStatus('connecting', 'connecting\u2026');
    var h = {};
    var k = apiKey();
    if (k) h.Authorization = 'Bearer ' + k;
    fetch('/dashboard/events?interval_ms=' + INTERVAL_MS, { headers: h, signal: my.signal, cache: 'no-store' })
      .then(function (r) {
        if (!r.ok) {
          return r.text().then(function (t) {
            var msg = serverMessage(r.status, t);
            if (r.status === 401) {
              blockedOnKey = true;
              setStatus('error', 'unauthorized');
              notice('The server wants an API key: ' + msg);
              var ki = $('api-key');
              ki.classList.add('invalid');
              ki.focus();
              throw { handled: true, noRetry: true };
            }
            notice('GET /dashboard/events: ' + msg);
            throw { handled: true, retryIn: r.status === 429 ? 5000 : null };
          });
        }
        blockedOnKey = false;
        $('api-key').classList.remove('invalid');
        setStatus('connected', 'live');
        notice('');
        retryMs = 1000;
        var reader = r.body.getReader();
        var dec = new TextDecoder();
        var buf = '';
        var ev = { event: 'message', data: [] };
        function line(l) {
          if (l.charAt(l.length - 1) === '\r') l = l.slice(0, -1);
          if (l === '') {
            if (ev.data.length) dispatch(ev.event, ev.data.join('\n'));
            ev = { event: 'message', data: [] };
            return;
          }
          if (l.charAt(0) === ':') return; // keep-alive comment
          var c = l.indexOf(':');
          var field = c < 0 ? l : l.slice(0, c);
          var val = c < 0 ? '' : l.slice(c + 1);
          if (val.charAt(0) === ' ') val = val.slice(1);
          if (field === 'event') ev.event = val;
          else if (field === 'data') ev.data.push(val);
        }
        function pump() {
          return reader.read().then(function (res) {
            if (res.done) throw { handled: false, message: 'the feed closed' };
            buf += dec.decode(res.value, { stream: true });
            var nl;
            while ((nl = buf.indexOf('\n')) >= 0) {
              line(buf.slice(0, nl));
              buf = buf.slice(nl + 1);
            }
            return pump();
          });
        }
        return pump();
      })
      .catch(function (e) {
        if (my !== ctrl) return; // replaced by a newer connection
        if (e && e.name === 'AbortError') return;
        if (e && e.noRetry) return;
        if (!(e && e.handled)) setStatus('error', 'disconnected: ' + ((e && e.message) || e) + ' \u2014 retrying');
        else setStatus('error', 'error \u2014 retrying');
        var wait = (e && e.retryIn) || retryMs;
        retryMs = Math.min(retryMs * 2, 8000);
        setTimeout(function () {
          if (my === ctrl && !blockedOnKey) connect();
        }, wait);
      });
  }

  function dispatch(name, data) {
    if (name !== 'snapshot') return;
    var snap;
    try {
      snap = JSON.parse(data);
    } catch (e) {
      return;
    }
    lastEventAt = Date.now();
    if ($('status').dataset.state !== 'connected') setStatus('connected', 'live');
    render(snap);
  }

  // A feed that stops ticking is shown as stalled.
  setInterval(function () {
    var s = $('status').dataset.state;
    if (s === 'connected' && lastEventAt && Date.now() - lastEventAt > 3000) {
      setStatus('error', 'stalled (no event for ' + Math.round((Date.now() - lastEventAt) / 1000) + ' s)');
    }
  }, 1000);

  // ---------- rendering ----------
  function render(snap) {
    $('connections').textContent = int(snap.connections_open);
    var rs = snap.response_store || {};
    $('response-store').textContent = int(rs.entries) + ' \u00b7 ' + bytes(rs.bytes) + ' / ' + bytes(rs.capacity_bytes);
    $('updated').textContent = new Date(snap.t_ms || Date.now()).toLocaleTimeString();

    var models = snap.models || [];
    var seen = {};
    models.forEach(function (m) {
      seen[m.model] = true;
      var pm = perModel[m.model] || (perModel[m.model] = makeModel(m.model));
      absorb(pm, m, snap.t_ms || Date.now());
      drawModel(pm, m);
    });
    Object.keys(perModel).forEach(function (name) {
      if (!seen[name]) {
        perModel[name].card.remove();
        delete perModel[name];
      }
    });
    var box = $('models');
    var none = box.querySelector('.none');
    if (!models.length && !none) box.appendChild(el('div', 'none', 'No model is loaded.'));
    if (models.length && none) none.remove();
    renderRequests(models);
  }

  function absorb(pm, m, t) {
    if (m.ledger) {
      pm.ledger.push({ t: t, l: m.ledger });
      if (pm.ledger.length > LEDGER_WINDOW) pm.ledger.splice(0, pm.ledger.length - LEDGER_WINDOW);
    }
    (m.steps || []).forEach(function (s) {
      if (s.n > pm.lastStep) {
        pm.steps.push(s);
        pm.lastStep = s.n;
      }
    });
    if (pm.steps.length > STEP_WINDOW) pm.steps.splice(0, pm.steps.length - STEP_WINDOW);
    (m.cancellations || []).forEach(function (c) {
      if (c.n > pm.lastCancel) {
        pm.cancels.push(c);
        pm.lastCancel = c.n;
      }
    });
    if (pm.cancels.length > CANCEL_WINDOW) pm.cancels.splice(0, pm.cancels.length - CANCEL_WINDOW);
    // Rates from counters between this snapshot and one ~5 s before.
    if (m.counters) {
      pm.counterHist.push({ t: t, c: m.counters });
      while (pm.counterHist.length > 2 && t - pm.counterHist[0].t > 5000) pm.counterHist.shift();
    }
  }

  function renderRequests(models) {
    var tbody = $('requests').querySelector('tbody');
    var rows = [];
    var counts = {};
    models.forEach(function (m) {
      (m.requests || []).forEach(function (r) {
        rows.push([m.model, r]);
        counts[r.state] = (counts[r.state] || 0) + 1;
      });
    });
    rows.sort(function (a, b) {
      return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : (b[1].age_ms || 0) - (a[1].age_ms || 0);
    });
    tbody.textContent = '';
    if (!rows.length) {
      var tr = el('tr', 'empty');
      var td = el('td', null, 'No request in flight.');
      td.colSpan = 7;
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
    rows.forEach(function (row) {
      var model = row[0];
      var r = row[1];
      var tr = el('tr');
      tr.dataset.state = r.state;
      tr.dataset.id = r.id;
      tr.dataset.model = model;
      tr.appendChild(el('td', 'mono', model));
      tr.appendChild(el('td', 'mono', r.id));
      var st = el('td');
      st.appendChild(el('span', 'state state-' + r.state, r.state));
      tr.appendChild(st);
      var prog = el('td', 'progress');
      var label;
      var frac = null;
      var barCls = 'bar';
      if (r.state === 'prefilling') {
        label = 'prefilling ' + int(r.prompt_computed) + '/' + int(r.prompt_tokens);
        frac = r.prompt_tokens ? r.prompt_computed / r.prompt_tokens : 0;
        barCls = 'bar prefill';
      } else if (r.state === 'decoding') {
        label = 'decoding \u00b7 ' + int(r.generated) + ' generated';
      } else if (r.state === 'paused') {
        label = 'paused \u00b7 ' + int(r.generated) + ' generated';
      } else if (r.state === 'retiring') {
        label = 'retiring';
      } else if (r.state === 'queued') {
        label = 'queued';
      } else {
        label = r.state;
      }
      var wrap = el('div', 'progress-cell');
      if (frac != null) {
        var bar = el('div', barCls);
        var fill = el('span');
        fill.style.width = Math.max(0, Math.min(100, frac * 100)).toFixed(1) + '%';
        bar.appendChild(fill);
        wrap.appendChild(bar);
      }
      wrap.appendChild(el('span', 'progress-text', label));
      prog.appendChild(wrap);
      tr.appendChild(prog);
      tr.appendChild(el('td', 'num', int(r.prompt_tokens)));
      tr.appendChild(el('td', 'num', int(r.generated)));
      tr.appendChild(el('td', 'num', secs((r.age_ms || 0) / 1000)));
      tbody.appendChild(tr);
    });
    var parts = Object.keys(counts).map(function (k) { return counts[k] + ' ' + k; });
    $('requests-summary').textContent = rows.length ? parts.join(' \u00b7 ') : '';
  }

  function panel(cls, title) {
    var p = el('section', 'panel ' + cls);
    var h = el('h3', null, title);
    var sub = el('span', 'sub');
    h.appendChild(sub);
    p.appendChild(h);
    return { p: p, sub: sub };
  }
  function legend(items) {
    var l = el('div', 'legend');
    items.forEach(function (it) {
      var s = el('span');
      var i = el('i');
      i.style.background = it[2];
      s.appendChild(i);
      s.appendChild(document.createTextNode(it[1]));
      l.appendChild(s);
    });
    return l;
  }
  function canvas(cls, testid) {
    var c = el('canvas', 'chart ' + cls);
    c.dataset.testid = testid;
    return c;
  }

  function makeModel(name) {
    var card = el('section', 'model-card');
    card.dataset.model = name;
    var head = el('div', 'model-head');
    head.appendChild(el('h2', null, name));
    var ready = el('span', 'pill');
    head.appendChild(ready);
    var facts = el('div', 'facts');
    head.appendChild(facts);
    card.appendChild(head);
    var grid = el('div', 'grid');
    card.appendChild(grid);

    var lp = panel('w6 ledger-panel', 'Memory ledger');
    var lc = canvas('h260 ledger-chart', 'ledger-chart');
    lp.p.appendChild(lc);
    lp.p.appendChild(legend(TERMS.concat([['budget', 'budget', '#c9302c']])));
    grid.appendChild(lp.p);

    var lt = panel('w3', 'Ledger now');
    var ltable = el('table', 'data compact ledger-table');
    ltable.dataset.testid = 'ledger-table';
    ltable.appendChild(el('tbody'));
    lt.p.appendChild(ltable);
    grid.appendChild(lt.p);

    var kp = panel('w3 kv-panel', 'KV cells & prefix cache');
    var kbar = el('div', 'kv-bar');
    kp.p.appendChild(kbar);
    var kdl = el('dl', 'kvs kv-list');
    kp.p.appendChild(kdl);
    grid.appendChild(kp.p);

    var sp = panel('w6 steps-panel', 'Step timeline');
    var sc = canvas('h190 steps-chart', 'steps-chart');
    sp.p.appendChild(sc);
    sp.p.appendChild(legend([['p', 'prompt tokens', C_PROMPT], ['d', 'decode rows (one token each)', C_DECODE]].concat(STEP_TIMES)));
    grid.appendChild(sp.p);

    var hists = {};
    [['ttft', 'TTFT'], ['itl', 'Inter-token'], ['e2e', 'End to end']].forEach(function (h) {
      var hp = panel('w3', h[1]);
      var hc = canvas('h160 hist-' + h[0], 'hist-' + h[0]);
      hp.p.appendChild(hc);
      grid.appendChild(hp.p);
      hists[h[0]] = { c: hc, sub: hp.sub };
    });

    var cp = panel('w3', 'Counters');
    var cdl = el('dl', 'kvs counters');
    cp.p.appendChild(cdl);
    grid.appendChild(cp.p);

    var xp = panel('w6', 'Recent cancellations');
    var xwrap = el('div', 'scroll');
    var xt = el('table', 'data cancellations');
    xt.dataset.testid = 'cancellations';
    var xh = el('thead');
    var xhr = el('tr');
    ['#', 'request', 'state when cancelled', 'latency to retirement', 'at'].forEach(function (t, i) {
      xhr.appendChild(el('th', i === 0 || i === 3 ? 'num' : null, t));
    });
    xh.appendChild(xhr);
    xt.appendChild(xh);
    xt.appendChild(el('tbody'));
    xwrap.appendChild(xt);
    xp.p.appendChild(xwrap);
    grid.appendChild(xp.p);

    $('models').appendChild(card);
    return {
      card: card,
      els: {
        ready: ready, facts: facts, ledgerChart: lc, ledgerSub: lp.sub, ledgerTable: ltable,
        stepsChart: sc, stepsSub: sp.sub, kvBar: kbar, kvList: kdl, kvSub: kp.sub, hists: hists,
        counters: cdl, cancels: xt, cancelsSub: xp.sub
      },
      ledger: [], steps: [], cancels: [], counterHist: [],
      lastStep: 0, lastCancel: 0
    };
  }

  function dl(list, pairs) {
    list.textContent = '';
    pairs.forEach(function (p) {
      var dt = el('dt', null, p[0]);
      if (p[2]) {
        var sw = el('span', 'swatch');
        sw.style.background = p[2];
        dt.insertBefore(sw, dt.firstChild);
      }
      list.appendChild(dt);
      list.appendChild(el('dd', null, p[1]));
    });
  }

  function drawModel(pm, m) {
    var e = pm.els;
    e.ready.textContent = m.draining ? 'draining' : m.ready ? 'ready' : 'not ready';
    e.ready.dataset.state = m.draining ? 'loading' : m.ready ? 'loaded' : 'error';
    e.facts.textContent = '';
    [
      ['memory', m.memory_kind], ['slots', int(m.running) + '/' + int(m.slots_total) + ' running'],
      ['prefilling', int(m.prefilling)], ['waiting', int(m.waiting)], ['paused', int(m.paused)],
      ['prompt budget', int(m.prompt_budget) + ' tokens/step']
    ].forEach(function (f) {
      var s = el('span', null, f[0] + ' ');
      s.appendChild(el('b', null, f[1] == null ? '\u2013' : String(f[1])));
      e.facts.appendChild(s);
    });

    // Ledger table.
    var L = m.ledger || {};
    var tb = e.ledgerTable.querySelector('tbody');
    tb.textContent = '';
    function row(label, v, color, strong, isBytes) {
      var tr = el('tr', strong ? 'total' : v === 0 ? 'zero' : null);
      var td = el('td');
      if (color) {
        var sw = el('span', 'swatch');
        sw.style.background = color;
        td.appendChild(sw);
      }
      td.appendChild(document.createTextNode(label));
      tr.appendChild(td);
      tr.appendChild(el('td', 'num', isBytes === false ? (v == null ? '\u2013' : String(v)) : bytes(v)));
      tr.dataset.term = label;
      tb.appendChild(tr);
    }
    TERMS.slice().reverse().forEach(function (t) { row(t[1], L[t[0]], t[2]); });
    row('sum of terms', L.sum_of_terms, null, true);
    row('rss', L.rss);
    row('KV pool', L.kv_pool);
    row('budget', L.budget);
    row('host available', L.mem_available == null ? null : bytes(L.mem_available) + ' / ' + bytes(L.mem_total), null, false, false);
    row('PSI some avg10', L.psi_some_avg10 == null ? null : L.psi_some_avg10.toFixed(2) + '%', null, false, false);
    e.ledgerSub.textContent = 'rss ' + bytes(L.rss) + (L.budget ? ' of budget ' + bytes(L.budget) : '');
    e.ledgerChart.dataset.samples = String(pm.ledger.length);
    drawLedger(e.ledgerChart, pm.ledger);

    // KV and prefix cache.
    var kv = m.kv || {};
    var total = kv.cells_total || 0;
    var used = kv.cells_used || 0, res = kv.cells_reserved || 0, cached = kv.cells_cached || 0;
    var free = Math.max(0, total - used - res - cached);
    e.kvBar.textContent = '';
    [[used, '#2f6fed', 'used'], [res, '#8fb0f7', 'reserved'], [cached, '#1f9d55', 'cached'], [free, '#d5dbe6', 'free']].forEach(function (p) {
      if (!total || !p[0]) return;
      var s = el('span');
      s.style.width = (100 * p[0] / total).toFixed(2) + '%';
      s.style.background = p[1];
      s.title = p[2] + ' ' + int(p[0]);
      e.kvBar.appendChild(s);
    });
    var px = m.prefix || {};
    var rate = px.lookups ? (100 * px.hits / px.lookups).toFixed(1) + '%' : '\u2013';
    dl(e.kvList, [
      ['cells used', int(used) + pct(used, total), '#2f6fed'],
      ['cells reserved', int(res) + pct(res, total), '#8fb0f7'],
      ['cells cached', int(cached) + pct(cached, total), '#1f9d55'],
      ['cells free', int(free) + pct(free, total), '#d5dbe6'],
      ['cells total', int(total) + ' \u00d7 ' + bytes(kv.bytes_per_cell)],
      ['prefix hit rate', rate + ' (' + int(px.hits) + '/' + int(px.lookups) + ')'],
      ['reused tokens', int(px.reused_tokens)],
      ['prefix entries', int(px.entries)],
      ['evictions', int(px.evictions)],
      ['host tier', int(px.host_entries) + ' \u00b7 ' + bytes(px.host_bytes)]
    ]);
    e.kvList.dataset.hitRate = rate;

    // Steps.
    e.stepsChart.dataset.steps = String(pm.steps.length);
    var last = pm.steps[pm.steps.length - 1];
    if (pm.steps.length) {
      var sumMs = 0;
      pm.steps.forEach(function (s) { sumMs += s.ms || 0; });
      var span = pm.steps.length > 1 ? (last.at_ms - pm.steps[0].at_ms) / 1000 : 0;
      e.stepsSub.textContent = 'step ' + int(last.n) + ' \u00b7 mean ' + (sumMs / pm.steps.length).toFixed(1) + ' ms' +
        (span > 0 ? ' \u00b7 ' + ((pm.steps.length - 1) / span).toFixed(1) + ' steps/s' : '') +
        ' \u00b7 last ' + pm.steps.length;
    } else {
      e.stepsSub.textContent = 'no step yet';
    }
    drawSteps(e.stepsChart, pm.steps);

    // Latency histograms.
    var lat = m.latency || {};
    Object.keys(e.hists).forEach(function (k) {
      var h = lat[k];
      var H = e.hists[k];
      H.c.dataset.n = String(h ? h.n : 0);
      H.sub.textContent = h && h.n ? 'n ' + int(h.n) + ' \u00b7 mean ' + secs(h.sum / h.n) : 'no sample yet';
      drawHist(H.c, lat.buckets_s || [], h);
    });

    // Counters, and rates over the last few seconds.
    var c = m.counters || {};
    var ch = pm.counterHist;
    var rateOf = function (k) {
      if (ch.length < 2) return '';
      var a = ch[0], b = ch[ch.length - 1];
      var dt = (b.t - a.t) / 1000;
      if (dt <= 0) return '';
      return ' \u00b7 ' + ((b.c[k] - a.c[k]) / dt).toFixed(1) + '/s';
    };
    dl(e.counters, [
      ['steps', int(c.steps) + rateOf('steps')],
      ['prompt tokens', int(c.prompt_tokens) + rateOf('prompt_tokens')],
      ['generated tokens', int(c.generated_tokens) + rateOf('generated_tokens')],
      ['finished', int(c.finished)],
      ['cancelled', int(c.cancelled)],
      ['failed', int(c.failed)]
    ]);

    // Cancellations, newest first.
    var xb = e.cancels.querySelector('tbody');
    xb.textContent = '';
    if (!pm.cancels.length) {
      var tr = el('tr', 'empty');
      var td = el('td', null, 'No cancellation recently.');
      td.colSpan = 5;
      tr.appendChild(td);
      xb.appendChild(tr);
    }
    pm.cancels.slice().reverse().forEach(function (x) {
      var tr = el('tr');
      tr.dataset.state = x.state;
      tr.dataset.id = x.id;
      tr.appendChild(el('td', 'num', int(x.n)));
      tr.appendChild(el('td', 'mono', x.id));
      var st = el('td');
      st.appendChild(el('span', 'state state-' + x.state, x.state));
      tr.appendChild(st);
      tr.appendChild(el('td', 'num', secs(x.latency_ms / 1000)));
      tr.appendChild(el('td', null, new Date(x.at_ms).toLocaleTimeString()));
      xb.appendChild(tr);
    });
    e.cancelsSub.textContent = pm.cancels.length ? pm.cancels.length + ' shown' : '';
  }
  function pct(v, total) {
    return total ? ' (' + (100 * v / total).toFixed(1) + '%)' : '';
  }

  // ---------- canvas ----------
  function setup(c) {
    var dpr = window.devicePixelRatio || 1;
    var w = c.clientWidth || 300, h = c.clientHeight || 150;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(h * dpr);
    }
    var g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    g.font = '10px system-ui, "DejaVu Sans", sans-serif';
    g.textBaseline = 'middle';
    return { g: g, w: w, h: h };
  }
  function niceMax(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var m = v / p;
    var n = m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10;
    return n * p;
  }
  function niceBytes(v) {
    // A round number of MiB/GiB for the axis.
    var u = 1;
    while (v / u >= 1024 && u < Math.pow(1024, 4)) u *= 1024;
    return niceMax(v / u) * u;
  }
  function emptyText(x, text) {
    x.g.fillStyle = '#8a92a6';
    x.g.textAlign = 'center';
    x.g.fillText(text, x.w / 2, x.h / 2);
    x.g.textAlign = 'left';
  }

  function drawLedger(c, hist) {
    var x = setup(c);
    var g = x.g;
    if (!hist.length) return emptyText(x, 'waiting for data');
    var padL = 58, padR = 8, padT = 8, padB = 18;
    var W = x.w - padL - padR, H = x.h - padT - padB;
    var top = 0;
    hist.forEach(function (s) {
      var sum = 0;
      TERMS.forEach(function (t) { sum += s.l[t[0]] || 0; });
      top = Math.max(top, sum, s.l.budget || 0);
    });
    var ymax = niceBytes(top * 1.05);
    var t1 = hist[hist.length - 1].t;
    // The window fills as samples come (at least 10 s, at most the window).
    var span = Math.min(LEDGER_WINDOW * INTERVAL_MS, Math.max(10000, t1 - hist[0].t));
    var t0 = t1 - span;
    var X = function (t) { return padL + W * (t - t0) / span; };
    var Y = function (v) { return padT + H - H * v / ymax; };

    // Grid and axis labels.
    g.strokeStyle = '#eceef3';
    g.fillStyle = '#8a92a6';
    g.lineWidth = 1;
    for (var i = 0; i <= 4; i++) {
      var v = ymax * i / 4;
      var y = Math.round(Y(v)) + 0.5;
      g.beginPath();
      g.moveTo(padL, y);
      g.lineTo(padL + W, y);
      g.stroke();
      g.textAlign = 'right';
      g.fillText(bytes(v), padL - 6, y);
    }
    g.textAlign = 'center';
    var stepS = span <= 20000 ? 5 : span <= 60000 ? 15 : 30;
    for (var s = 0; s <= span / 1000 + 0.001; s += stepS) {
      g.fillText(s === 0 ? 'now' : '\u2212' + s + 's', X(t1 - s * 1000), x.h - 7);
    }

    // Stacked areas. One sample is drawn as a thin column.
    var pts = hist.length === 1 ? [{ t: t1 - INTERVAL_MS, l: hist[0].l }, hist[0]] : hist;
    var base = pts.map(function () { return 0; });
    TERMS.forEach(function (t) {
      var k = t[0];
      var topv = pts.map(function (p, j) { return base[j] + (p.l[k] || 0); });
      g.beginPath();
      pts.forEach(function (p, j) {
        var px = X(p.t), py = Y(topv[j]);
        if (j === 0) g.moveTo(px, py);
        else g.lineTo(px, py);
      });
      for (var j = pts.length - 1; j >= 0; j--) g.lineTo(X(pts[j].t), Y(base[j]));
      g.closePath();
      g.fillStyle = t[2];
      g.fill();
      base = topv;
    });

    // Budget line.
    var b = hist[hist.length - 1].l.budget;
    if (b) {
      g.strokeStyle = '#c9302c';
      g.setLineDash([5, 4]);
      g.beginPath();
      g.moveTo(padL, Y(b) + 0.5);
      g.lineTo(padL + W, Y(b) + 0.5);
      g.stroke();
      g.setLineDash([]);
    }
  }

  function drawSteps(c, steps) {
    var x = setup(c);
    var g = x.g;
    if (!steps.length) return emptyText(x, 'no step yet');
    // Three lanes, each on its own scale: prompt tokens, decode rows, and
    // the step's time split into plan / build / wait / outputs.
    var padL = 58, padR = 8, padT = 4, gap = 8, padB = 2;
    var W = x.w - padL - padR;
    var Htot = x.h - padT - padB - 2 * gap;
    var Hp = Math.round(Htot * 0.34), Hd = Math.round(Htot * 0.22), Ht = Htot - Hp - Hd;
    var yp = padT, yd = yp + Hp + gap, yt = yd + Hd + gap;
    var n = STEP_WINDOW;
    var bw = W / n;
    var off = n - steps.length;
    var maxP = 0, maxD = 0, maxMs = 0;
    steps.forEach(function (s) {
      maxP = Math.max(maxP, s.prompt || 0);
      maxD = Math.max(maxD, s.decode || 0);
      var ms = 0;
      STEP_TIMES.forEach(function (t) { ms += s[t[0]] || 0; });
      maxMs = Math.max(maxMs, ms);
    });
    maxP = niceMax(maxP);
    maxD = Math.max(1, Math.ceil(maxD));
    maxMs = niceMax(maxMs);

    function lane(y, h, top, unit) {
      g.strokeStyle = '#e3e6ec';
      g.beginPath();
      g.moveTo(padL, y + h + 0.5);
      g.lineTo(padL + W, y + h + 0.5);
      g.stroke();
      g.fillStyle = '#8a92a6';
      g.textAlign = 'right';
      g.fillText(top + ' ' + unit, padL - 5, y + 5);
      g.fillText('0', padL - 5, y + h - 3);
    }
    lane(yp, Hp, int(maxP), 'tok');
    lane(yd, Hd, maxD, maxD === 1 ? 'row' : 'rows');
    lane(yt, Ht, maxMs, 'ms');

    steps.forEach(function (s, i) {
      var px = padL + (off + i) * bw;
      var w = Math.max(1, bw - (bw > 3 ? 1 : 0));
      var hp = Hp * (s.prompt || 0) / maxP;
      if (hp) {
        g.fillStyle = C_PROMPT;
        g.fillRect(px, yp + Hp - Math.max(hp, 1), w, Math.max(hp, 1));
      }
      var hd = Hd * (s.decode || 0) / maxD;
      if (hd) {
        g.fillStyle = C_DECODE;
        g.fillRect(px, yd + Hd - hd, w, hd);
      }
      var acc = 0;
      STEP_TIMES.forEach(function (t) {
        var h = Ht * (s[t[0]] || 0) / maxMs;
        g.fillStyle = t[2];
        g.fillRect(px, yt + Ht - acc - h, w, h);
        acc += h;
      });
    });
  }

  function drawHist(c, buckets, h) {
    var x = setup(c);
    var g = x.g;
    if (!h || !h.n) return emptyText(x, 'no sample yet');
    var per = [];
    for (var i = 0; i < buckets.length; i++) per.push((h.counts[i] || 0) - (i ? h.counts[i - 1] || 0 : 0));
    per.push(h.n - (h.counts[buckets.length - 1] || 0));
    var labels = buckets.map(function (b) { return '\u2264' + bucketLabel(b); }).concat(['>' + bucketLabel(buckets[buckets.length - 1])]);
    var max = Math.max.apply(null, per.concat([1]));
    var padL = 24, padR = 6, padT = 14, padB = 34;
    var W = x.w - padL - padR, H = x.h - padT - padB;
    var bw = W / per.length;
    per.forEach(function (v, i) {
      var bh = H * v / max;
      var px = padL + i * bw;
      g.fillStyle = v ? '#2f6fed' : '#e3e7ee';
      g.fillRect(px + 1, padT + H - Math.max(bh, 1), bw - 2, Math.max(bh, 1));
      g.fillStyle = '#4b5366';
      g.textAlign = 'center';
      if (v) g.fillText(String(v), px + bw / 2, padT + H - bh - 6);
      g.save();
      g.translate(px + bw / 2, padT + H + 4);
      g.rotate(-Math.PI / 4);
      g.textAlign = 'right';
      g.fillStyle = '#8a92a6';
      g.fillText(labels[i], 0, 0);
      g.restore();
    });
  }

  // ---------- start ----------
  function init() {
    var ki = $('api-key');
    ki.value = apiKey();
    ki.addEventListener('change', function () {
      var v = ki.value.trim();
      if (v) localStorage.setItem(LS_KEY, v);
      else localStorage.removeItem(LS_KEY);
      ki.classList.remove('invalid');
      blockedOnKey = false;
      connect();
    });
    connect();
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
