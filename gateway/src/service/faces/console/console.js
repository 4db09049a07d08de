// The operator console (docs/console.md). Plain JavaScript, no build step, nothing fetched from
// anywhere but this gateway. Everything shown comes from the gateway's own routes, asked with
// the operator credential typed into the page (session storage, an Authorization header, never
// a URL); `GET /v1/events` tells the page when to look again. Data is put on the page as text
// (textContent), never as markup.
'use strict';

const KEY = 'halo-gateway.operator';
const $ = (id) => document.getElementById(id);

const state = {
  token: sessionStorage.getItem(KEY) || '',
  lastEventId: null,
  abort: null,
  reasons: {},
  status: null,
  responses: [],
  obligations: [],
  track: [],
  streaming: null, // binding of the target the vehicle streams, from `vehicle_target`
  log: [],
  refreshTimer: null,
  statusTimer: null,
  slowTimer: null,
};

// ---- small helpers -------------------------------------------------------------------------

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function fixed(x, digits) {
  return typeof x === 'number' && Number.isFinite(x) ? x.toFixed(digits) : '–';
}

function ago(ms) {
  const s = Math.max(0, ms) / 1000;
  if (s < 60) return s.toFixed(1) + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.floor(s % 60) + ' s';
  return (s / 3600).toFixed(1) + ' h';
}

function clock(unixMs) {
  return new Date(unixMs).toLocaleTimeString([], { hour12: false });
}

function words(code) {
  if (!code) return '';
  const w = state.reasons[code];
  return w ? code + ': ' + w : code;
}

// ---- talking to the gateway ----------------------------------------------------------------

async function api(method, path, body) {
  const headers = { Authorization: 'Bearer ' + state.token };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let r;
  try {
    r = await fetch(path, {
      method, headers, cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    return { ok: false, status: 0, code: 'NO_ANSWER', message: 'the gateway did not answer (' + e.message + ')' };
  }
  let j = null;
  try { j = await r.json(); } catch (_) { /* an empty or non-JSON body */ }
  if (r.ok) return { ok: true, status: r.status, body: j };
  const err = (j && j.error) || {};
  return {
    ok: false, status: r.status,
    code: err.code || 'HTTP_' + r.status,
    message: err.message || r.statusText || 'refused',
  };
}

// The typed answer of an operator action, on screen until the next one.
function showAnswer(what, res) {
  const a = $('answer');
  a.hidden = false;
  a.className = 'answer ' + (res.ok ? 'ok' : 'refused');
  a.dataset.code = res.ok ? 'OK' : res.code;
  a.dataset.what = what;
  a.replaceChildren(
    el('strong', { text: what + ': ' }),
    res.ok
      ? document.createTextNode('done' + (res.summary ? ' — ' + res.summary : ''))
      : el('span', {}, (res.status ? 'refused (HTTP ' + res.status + ') ' : 'refused ') , el('code', { text: res.code }), ' ' + res.message),
  );
  addLog({ text: what + ': ' + (res.ok ? 'done' : 'refused, ' + res.code), severity: res.ok ? 6 : 3 });
}

// ---- the event stream (fetch, so the credential goes in a header) ---------------------------

async function follow() {
  if (state.abort) state.abort.abort();
  const ctl = new AbortController();
  state.abort = ctl;
  const headers = { Authorization: 'Bearer ' + state.token, Accept: 'text/event-stream' };
  if (state.lastEventId) headers['Last-Event-ID'] = state.lastEventId;
  setStream(false, 'connecting');
  try {
    const r = await fetch('/v1/events', { headers, signal: ctl.signal, cache: 'no-store' });
    if (!r.ok) {
      let code = 'HTTP_' + r.status;
      try { code = (await r.json()).error.code; } catch (_) { /* keep the status */ }
      setStream(false, 'refused: ' + code);
      if (r.status === 401 || r.status === 403) return; // a wrong credential: no retry loop
      throw new Error(code);
    }
    setStream(true, 'live');
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let ev = { id: null, name: 'message', data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (line === '') {
          if (ev.data.length) onEvent(ev.id, ev.name, ev.data.join('\n'));
          ev = { id: null, name: 'message', data: [] };
        } else if (line.startsWith(':')) {
          // keep-alive
        } else {
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
          if (field === 'id') ev.id = val;
          else if (field === 'event') ev.name = val;
          else if (field === 'data') ev.data.push(val);
        }
      }
    }
    setStream(false, 'closed');
  } catch (e) {
    if (ctl.signal.aborted) return;
    setStream(false, 'lost');
  }
  if (!ctl.signal.aborted && state.token) setTimeout(follow, 2000);
}

function setStream(on, text) {
  const s = $('stream');
  s.className = 'pill ' + (on ? 'on' : 'off');
  s.textContent = 'events: ' + text;
  s.dataset.state = on ? 'live' : 'off';
}

function onEvent(id, name, raw) {
  if (id) state.lastEventId = id;
  let d = {};
  try { d = JSON.parse(raw); } catch (_) { return; }
  const line = eventWords(name, d);
  if (line) addLog(line);
  if (name === 'vehicle_target') {
    if (d.state === 'started') state.streaming = d.binding;
    else if (state.streaming === d.binding) state.streaming = null;
  }
  if (name === 'vehicle_hold' || name === 'vehicle_override' || name === 'operator_hold') {
    state.streaming = null;
  }
  scheduleRefresh();
}

// One line for the log, in words; null for what the panels already show.
function eventWords(name, d) {
  const comp = (d.response && d.component) ? d.response + '/' + d.component : '';
  switch (name) {
    case 'admitted': return { text: 'admitted ' + d.response + (d.principal ? ' from ' + d.principal : '') + ' (' + (d.components || []).join(', ') + ')', severity: 6 };
    case 'phase': return { text: comp + ' ' + d.phase + (d.reason ? ' — ' + words(d.reason) : ''), severity: d.reason ? 4 : 6 };
    case 'gate':
      if (d.outcome === 'dispatched') return { text: 'gate: dispatched ' + comp, severity: 6 };
      return { text: 'gate: ' + (d.outcome || 'decided') + ' ' + comp + (d.reason ? ' — ' + words(d.reason) : ''), severity: 4 };
    case 'obligation_created': {
      const o = d.obligation || {};
      const refresh = (o.required || []).length ? 'refresh ' + o.required.join(', ') : 'a fresh candidate';
      return { text: 'refresh request #' + o.id + ' for ' + o.response + '/' + o.component + ': ' + refresh + ' (' + words(o.reason) + ')', severity: 5 };
    }
    case 'obligation_changed': return { text: 'obligation #' + d.id + ' ' + d.state, severity: 6 };
    case 'vehicle_mode': return { text: 'PX4 mode ' + (d.from ? d.from + ' → ' : '') + d.to, severity: 5 };
    case 'vehicle_armed': return { text: d.armed ? 'armed' : 'disarmed', severity: 5 };
    case 'vehicle_link': return d.up === undefined ? null : { text: 'autopilot link ' + (d.up ? 'up' : 'down'), severity: d.up ? 6 : 2 };
    case 'vehicle_text': return { text: 'PX4 says: ' + d.text, severity: d.severity };
    case 'vehicle_hold': return { text: 'the vehicle holds (' + (d.reason || d.kind || '') + ')', severity: 4 };
    case 'vehicle_override': return { text: 'the pilot took over (' + d.to + '); the gateway stopped', severity: 3 };
    case 'operator_hold': return { text: d.held ? 'held by the operator' : 'released by the operator', severity: 5 };
    case 'deny_hold': return { text: 'deny-hold: ' + comp + ' lost its support', severity: 3 };
    case 'receipts_unavailable': return { text: 'receipts failed: nothing dispatches, the vehicle holds (' + d.reason + ')', severity: 2 };
    case 'contract': return { text: 'contract: ' + (d.verdict || '') + (d.reason ? ' — ' + words(d.reason) : ''), severity: d.verdict === 'allow' ? 6 : 4 };
    case 'shutdown': return { text: 'the gateway is stopping', severity: 3 };
    case 'gap': return { text: 'missed events ' + d.missed_from + '–' + d.missed_to + ' (the gateway no longer holds them)', severity: 4 };
    default: return null;
  }
}

function addLog(entry) {
  state.log.unshift({ at: Date.now(), ...entry });
  state.log.length = Math.min(state.log.length, 200);
  renderLog();
}

// ---- reading the state ---------------------------------------------------------------------

function scheduleRefresh() {
  if (state.refreshTimer) return;
  state.refreshTimer = setTimeout(() => { state.refreshTimer = null; refreshAll(); }, 120);
}

async function refreshStatus() {
  const r = await api('GET', '/v1/status');
  if (!r.ok) {
    $('gateway').textContent = 'no answer: ' + r.code;
    return;
  }
  state.status = r.body;
  const p = r.body.vehicle && r.body.vehicle.position_ned_m;
  if (p) {
    const last = state.track[state.track.length - 1];
    if (!last || Math.hypot(last[0] - p[0], last[1] - p[1]) > 0.05) state.track.push([p[0], p[1]]);
    if (state.track.length > 3000) state.track.splice(0, state.track.length - 3000);
  }
  renderStatus();
  renderPlan();
}

async function refreshAll() {
  const [resp, obl, contract, head] = await Promise.all([
    api('GET', '/v1/responses'),
    api('GET', '/v1/obligations?state=open'),
    api('GET', '/v1/contract'),
    api('GET', '/v1/audit/head'),
    refreshStatus(),
  ]);
  if (resp.ok) state.responses = resp.body;
  if (obl.ok) state.obligations = obl.body;
  renderResponses();
  renderObligations();
  if (contract.ok) renderContract(contract.body);
  renderReceipts(head.ok ? head.body : null);
  renderPlan();
}

// ---- panels --------------------------------------------------------------------------------

const CONTROL_WORDS = {
  gateway: 'the gateway (handed over by the operator)',
  operator_hold: 'held by the operator: no agent action dispatches',
  operator: 'the operator / pilot (not handed to the gateway)',
};

function renderStatus() {
  const s = state.status;
  if (!s) return;
  const v = s.vehicle || {};
  $('gateway').textContent = s.service + ' ' + s.version + ', boot ' + s.boot_epoch + ', up ' + ago(s.uptime_s * 1000)
    + ', catalog ' + s.catalog.id + ' v' + s.catalog.version + ', vehicle ' + (s.vehicle_url || '–');
  $('vehicle-mode').textContent = v.mode || 'unknown';
  $('vehicle-armed').textContent = v.armed ? 'armed' : 'disarmed';
  $('vehicle-link').textContent = v.link_up ? 'up' : 'DOWN';
  $('vehicle-link').className = v.link_up ? '' : 'bad';
  $('vehicle-landed').textContent = v.landed_state || '–';
  $('vehicle-height').textContent = typeof v.height_above_home_m === 'number' ? fixed(v.height_above_home_m, 1) + ' m' : '–';
  $('vehicle-battery').textContent = typeof v.battery_pct === 'number' ? fixed(v.battery_pct, 0) + ' %'
    : typeof v.battery_v === 'number' ? fixed(v.battery_v, 2) + ' V' : '–';
  const c = $('control');
  c.dataset.control = v.control;
  c.textContent = v.override_mode
    ? 'the pilot took over (' + v.override_mode + '); Release hands the vehicle back'
    : (CONTROL_WORDS[v.control] || v.control);
  $('vehicle-setpoints').textContent = String(v.setpoints_sent);
  renderSources(s.sources || []);
  if (state.log.length === 0 && Array.isArray(s.last_decisions)) {
    for (const d of s.last_decisions) state.log.unshift({ at: d.at_unix_ms, text: d.text, severity: d.severity });
    renderLog();
  }
}

function renderSources(sources) {
  const rows = sources.map((s) => {
    const limit = s.limit_ms;
    const age = s.age_ms;
    const missing = age === null || age === undefined;
    const stale = limit !== null && limit !== undefined && (missing || age > limit);
    const pct = missing || !limit ? 0 : Math.min(100, (100 * age) / limit);
    const cls = 'bar' + (stale ? ' stale' : '') + (limit ? '' : ' unlimited');
    const label = missing ? 'no data' : ago(age) + (limit ? ' / ' + ago(limit) : '');
    const fill = el('div', { class: 'fill' });
    fill.style.width = pct.toFixed(1) + '%'; // CSSOM: the page's policy allows no style attribute
    return el('div', { class: cls, 'data-source': s.source, 'data-stale': stale ? 'true' : 'false',
      'data-sent-by': s.sent_by,
      title: s.source + ': epoch ' + (s.epoch ?? '–') + (s.provenance ? ', from ' + s.provenance : '')
        + (s.sent_by ? ', sent by ' + s.sent_by : '') },
      el('span', {}, s.source, s.sent_by ? el('small', { class: 'by', text: 'by ' + s.sent_by }) : null),
      el('div', { class: 'track' }, fill),
      el('span', { class: 'age', text: label }));
  });
  $('sources').replaceChildren(...rows);
}

function isCertWait(c) {
  return c.action && c.certificate && ['CERTIFICATE_UNKNOWN', 'CERTIFICATE_NOT_BOUND', 'CERTIFICATE_EXPIRED'].includes(c.reason);
}

let shownResponses = null;
function renderResponses() {
  // Re-drawn only when something in it changed: a button is not replaced under the pointer.
  const key = JSON.stringify(state.responses) + '|' + Object.keys(state.reasons).length;
  if (key === shownResponses) return;
  shownResponses = key;
  const box = $('responses');
  if (!state.responses.length) {
    box.replaceChildren(el('p', { class: 'dim', text: 'no live response' }));
    return;
  }
  const tables = state.responses.map((r) => {
    const head = el('tr', {}, ...['component', 'type', 'phase', 'reason', 'certificate', 'digest (what a certificate covers)', ''].map((h) => el('th', { text: h })));
    const rows = r.components.map((c) => {
      const key = r.response + '/' + c.id;
      const acts = el('td', {});
      if (isCertWait(c)) {
        acts.append(el('button', { type: 'button', class: 'small', 'data-act': 'approve', 'data-component': key,
          title: 'issue ' + c.certificate + ' covering exactly ' + c.digest,
          onclick: () => approve(key, c.certificate, c.digest) }, 'Approve'));
      } else if (c.action && c.certificate && ['retained', 'pending', 'dispatched', 'observed_success'].includes(c.phase)) {
        acts.append(el('button', { type: 'button', class: 'small danger', 'data-act': 'revoke', 'data-component': key,
          title: 'revoke ' + c.certificate + ': what it covers loses its support',
          onclick: () => revoke(c.certificate) }, 'Revoke'));
      }
      return el('tr', { 'data-component': key, 'data-phase': c.phase, 'data-digest': c.digest },
        el('td', { text: c.id + (c.generation > 1 ? ' (gen ' + c.generation + ')' : '') }),
        el('td', { text: c.type }),
        el('td', {}, el('span', { class: 'phase ' + c.phase, text: c.phase.replace('_', ' ') })),
        el('td', { text: c.reason ? words(c.reason) : '', title: c.reason || '' }),
        el('td', { text: c.certificate || '' }),
        el('td', { class: 'digest', text: c.digest }),
        acts);
    });
    return el('table', { 'data-response': r.response, 'data-principal': r.principal },
      el('caption', { text: r.response + (r.principal ? ' — sent by ' + r.principal : '') }), el('thead', {}, head), el('tbody', {}, ...rows));
  });
  box.replaceChildren(...tables);
}

function renderObligations() {
  const box = $('obligations');
  const open = state.obligations.filter((o) => o.open);
  if (!open.length) {
    box.replaceChildren(el('p', { class: 'dim', text: 'none open' }));
    return;
  }
  const now = Date.now();
  box.replaceChildren(el('ul', {}, ...open.map((o) => el('li', { 'data-obligation': o.id },
    el('strong', { text: '#' + o.id + ' ' + o.response + '/' + o.component }),
    document.createTextNode(': ' + words(o.reason) + '; '
      + ((o.required || []).length ? 'refresh ' + o.required.join(', ') + ', then a' : 'a')
      + ' fresh candidate may replace ' + ((o.scope || []).join(', ') || 'it') + ' (' + o.route + ', '
      + o.assignee + '); expires in ' + ago(o.expires_at_unix_ms - now))))));
}

function renderContract(c) {
  const box = $('contract');
  if (!c.registered) {
    box.replaceChildren(el('p', { class: 'dim', text: 'no contract registered: the gate runs HALO alone (domain ' + c.domain + ')' }));
    return;
  }
  const v = c.versions || {};
  const trace = c.trace || [];
  box.replaceChildren(el('dl', { class: 'facts' },
    el('dt', { text: 'root' }), el('dd', { text: String(c.root_state) }),
    el('dt', { text: 'versions' }), el('dd', { text: Object.entries(v).map(([k, x]) => k + ' ' + x).join(', ') }),
    el('dt', { text: 'goals (witness path)' }), el('dd', { text: (c.witness_path || []).join(' ← ') || '–' }),
    el('dt', { text: 'committed effects' }), el('dd', { 'data-effects': String(trace.length), text: trace.join(', ') || 'none yet' }),
    el('dt', { text: 'goal revisions' }), el('dd', { text: String(c.goal_revisions) })));
}

function renderReceipts(head) {
  const s = state.status;
  if (!s) return;
  const r = s.receipts || {};
  const items = [
    ['state', r.state === 'ok' ? 'ok' : 'REFUSING: ' + (r.reason || '')],
    ['written / lost', r.written + ' / ' + r.lost],
    ['log', r.current ? r.current.split('/').pop() : '–'],
  ];
  const cp = head && head.checkpoint;
  items.push(['signed head', cp ? 'receipt ' + cp.count + ', ' + String(cp.head).slice(0, 16) + '…, ' + clock(cp.wall_unix_ms) : 'none yet (no audit key, or the first checkpoint is due)']);
  const ex = head && head.exported;
  items.push(['exported (kept off the machine)', ex && Object.keys(ex).length
    ? Object.entries(ex).map(([log, n]) => log + ': ' + (n ? 'up to receipt ' + n : 'nothing')).join('; ') : '–']);
  $('receipts').replaceChildren(...items.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: v })]));
}

function renderLog() {
  $('log').replaceChildren(...state.log.slice(0, 120).map((l) => el('li', { class: 'sev-' + l.severity },
    el('time', { text: clock(l.at) }), document.createTextNode(l.text))));
}

// The plan view: north up, east right, the corridor, the track, the vehicle and the targets.
function renderPlan() {
  const plan = $('plan');
  const s = state.status;
  const pts = [];
  const corridor = s && (s.sources || []).find((x) => x.bounds);
  const b = corridor && corridor.bounds;
  for (const p of state.track) pts.push(p);
  const targets = [];
  for (const r of state.responses) for (const c of r.components) {
    if (!c.target_ned_m) continue;
    const kind = state.streaming && c.binding === state.streaming ? 'current'
      : c.phase === 'dispatched' || c.phase === 'observed_success' ? 'flown'
      : c.phase === 'withheld' || c.phase === 'invalidated' ? 'withheld' : 'planned';
    targets.push({ n: c.target_ned_m[0], e: c.target_ned_m[1], kind, name: r.response + '/' + c.id });
    pts.push([c.target_ned_m[0], c.target_ned_m[1]]);
  }
  const here = s && s.vehicle && s.vehicle.position_ned_m;
  if (here) pts.push([here[0], here[1]]);
  // The flight fills the view; the corridor joins it when it is not much larger (else its
  // edges show where they come near, and its extent is written in the corner).
  if (b) {
    const extent = (i) => (pts.length ? Math.max(...pts.map((p) => p[i])) - Math.min(...pts.map((p) => p[i])) : 0);
    const flight = Math.max(extent(0), extent(1));
    if (Math.max(b.north_max - b.north_min, b.east_max - b.east_min) <= 3 * Math.max(flight, 20)) {
      pts.push([b.north_min, b.east_min], [b.north_max, b.east_max]);
    }
  }
  if (!pts.length) pts.push([-10, -10], [10, 10]);
  let nMin = Math.min(...pts.map((p) => p[0])), nMax = Math.max(...pts.map((p) => p[0]));
  let eMin = Math.min(...pts.map((p) => p[1])), eMax = Math.max(...pts.map((p) => p[1]));
  const span = Math.max(nMax - nMin, eMax - eMin, 20) * 1.2;
  const nC = (nMin + nMax) / 2, eC = (eMin + eMax) / 2;
  const px = 380 / span;
  const X = (e) => 200 + (e - eC) * px;
  const Y = (n) => 200 - (n - nC) * px;
  const kids = [];
  const step = Math.pow(10, Math.floor(Math.log10(span / 2)));
  for (let g = Math.ceil((eC - span / 2) / step) * step; g <= eC + span / 2; g += step) {
    kids.push(svg('line', { class: 'grid', x1: X(g), x2: X(g), y1: 0, y2: 400 }));
    kids.push(svg('text', { class: 'axis', x: X(g) + 2, y: 396 }, 'E ' + +g.toFixed(1)));
  }
  for (let g = Math.ceil((nC - span / 2) / step) * step; g <= nC + span / 2; g += step) {
    kids.push(svg('line', { class: 'grid', y1: Y(g), y2: Y(g), x1: 0, x2: 400 }));
    kids.push(svg('text', { class: 'axis', x: 2, y: Y(g) - 2 }, 'N ' + +g.toFixed(1)));
  }
  if (b) {
    kids.push(svg('text', { class: 'axis', x: 396, y: 10, 'text-anchor': 'end' },
      'corridor N ' + b.north_min + '…' + b.north_max + ' m, E ' + b.east_min + '…' + b.east_max + ' m'));
    kids.push(svg('rect', { class: 'corridor', 'data-kind': 'corridor', x: X(b.east_min), y: Y(b.north_max),
      width: (b.east_max - b.east_min) * px, height: (b.north_max - b.north_min) * px }));
  }
  if (state.track.length > 1) {
    kids.push(svg('polyline', { class: 'track', 'data-kind': 'track', points: state.track.map((p) => X(p[1]).toFixed(1) + ',' + Y(p[0]).toFixed(1)).join(' ') }));
  }
  for (const t of targets) {
    const x = X(t.e), y = Y(t.n);
    if (t.kind === 'withheld') {
      kids.push(svg('path', { class: 'withheld', 'data-target': t.name, 'data-kind': t.kind, d: `M${x - 5},${y - 5}L${x + 5},${y + 5}M${x - 5},${y + 5}L${x + 5},${y - 5}` }));
    } else {
      kids.push(svg('circle', { class: t.kind === 'planned' ? 'flown' : t.kind, 'data-target': t.name, 'data-kind': t.kind, cx: x, cy: y, r: t.kind === 'current' ? 8 : 6 }));
    }
    kids.push(svg('text', { class: 'label', x: x + 8, y: y - 6 }, t.name));
  }
  if (here) kids.push(svg('circle', { class: 'vehicle', 'data-kind': 'vehicle', cx: X(here[1]), cy: Y(here[0]), r: 4 }));
  plan.replaceChildren(...kids);
}

// ---- operator actions ----------------------------------------------------------------------

async function approve(key, certificate, digest) {
  const secs = Math.round(Number($('approve-seconds').value) || 60);
  const res = await api('POST', '/v1/certificates', {
    id: certificate, covers: digest, valid_for_ms: secs * 1000, issuer: 'operator-console',
  });
  res.summary = certificate + ' covers ' + key + ' (' + digest.slice(0, 12) + '…) for ' + secs + ' s';
  showAnswer('Approve ' + key, res);
  scheduleRefresh();
}

async function revoke(certificate) {
  const res = await api('DELETE', '/v1/certificates/' + encodeURIComponent(certificate));
  showAnswer('Revoke ' + certificate, res);
  scheduleRefresh();
}

let landArmed = null;
async function operatorAct(op, button) {
  if (op === 'land' && landArmed === null) {
    // Two clicks: the first asks, the second lands.
    button.textContent = 'Confirm land';
    landArmed = setTimeout(() => { landArmed = null; button.textContent = 'Land'; }, 4000);
    return;
  }
  if (landArmed !== null) { clearTimeout(landArmed); landArmed = null; button.textContent = 'Land'; }
  const res = await api('POST', '/v1/operator/' + op, {});
  showAnswer(op[0].toUpperCase() + op.slice(1), res);
  scheduleRefresh();
}

async function contractOp(what, body) {
  const res = await api('POST', '/v1/contract', body);
  if (res.ok && res.body && res.body.verdict && res.body.verdict !== 'allow') {
    // The monitor's verdict: the request went through, the operation was not allowed.
    showAnswer(what, { ok: false, status: null, code: res.body.reason || res.body.verdict,
      message: '(the monitor says ' + res.body.verdict + ') ' + (res.body.detail || '') });
  } else {
    if (res.ok) res.summary = 'the monitor allows it';
    showAnswer(what, res);
  }
  scheduleRefresh();
}

// ---- start ---------------------------------------------------------------------------------

function connect() {
  const logged = Boolean(state.token);
  $('login').hidden = logged;
  $('logout').hidden = !logged;
  $('hint').hidden = logged;
  clearInterval(state.statusTimer);
  clearInterval(state.slowTimer);
  if (!logged) {
    if (state.abort) state.abort.abort();
    setStream(false, 'off');
    return;
  }
  follow();
  refreshAll();
  state.statusTimer = setInterval(refreshStatus, 500);
  state.slowTimer = setInterval(refreshAll, 3000);
}

document.addEventListener('DOMContentLoaded', () => {
  fetch('/console/reasons.json').then((r) => r.json()).then((t) => { state.reasons = t; }).catch(() => {});
  $('login').addEventListener('submit', (e) => {
    e.preventDefault();
    state.token = $('token').value.trim();
    $('token').value = '';
    if (state.token) sessionStorage.setItem(KEY, state.token);
    connect();
  });
  $('logout').addEventListener('click', () => {
    state.token = '';
    sessionStorage.removeItem(KEY);
    connect();
  });
  for (const b of document.querySelectorAll('button[data-op]')) {
    b.addEventListener('click', () => operatorAct(b.dataset.op, b));
  }
  $('register').addEventListener('submit', (e) => {
    e.preventDefault();
    let contract;
    try { contract = JSON.parse($('contract-json').value); } catch (err) {
      showAnswer('Register', { ok: false, status: 0, code: 'NOT_JSON', message: 'the contract is not JSON: ' + err.message });
      return;
    }
    // A whole workflow file (docs/examples/contract-workflow.json) carries the contract inside.
    if (contract && contract.contract && !contract.root) contract = contract.contract;
    contractOp('Register contract', { op: 'register_root', approved_by: $('approved-by').value.trim(), contract });
  });
  $('reauthorize').addEventListener('submit', (e) => {
    e.preventDefault();
    contractOp('Reauthorize', { op: 'reauthorize', goal: $('reauth-goal').value.trim() });
  });
  connect();
});
