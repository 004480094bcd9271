// agentic-host console: a single page over the service's own API. It builds
// every element with the DOM (never innerHTML), so text from models, tools
// and users is always text. The API key lives in this tab's session storage
// and travels in the Authorization header only.
'use strict';

(() => {
  const KEY = 'agentic-host.console.key';
  let apiKey = sessionStorage.getItem(KEY) || '';
  let current = null; // the mounted view: {unmount(), onChange(change)}
  const feedListeners = new Set();

  // ---- DOM helpers ----

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  function clear(el) { while (el.firstChild) el.firstChild.remove(); }

  function stateBadge(state, attrs) {
    return h('span', Object.assign({ class: 'state', 'data-state': state }, attrs || {}), (state || 'unknown').replace(/_/g, ' '));
  }

  function fmtTime(t) {
    if (!t) return '';
    const d = new Date(t);
    if (isNaN(d)) return '';
    return d.toLocaleString();
  }

  function fmtCost(c) { return '$' + (c || 0).toFixed((c || 0) < 0.01 && c ? 6 : 4); }
  function fmtInt(n) { return (n || 0).toLocaleString(); }

  function prettyJSON(v) {
    if (v === undefined || v === null) return '';
    if (typeof v === 'string') {
      try { return JSON.stringify(JSON.parse(v), null, 2); } catch { return v; }
    }
    return JSON.stringify(v, null, 2);
  }

  function shortHash(s) {
    if (!s) return '';
    // A module's "sha256:HEX", or an MCP tool's "mcp:SERVER/TOOL@sha256:HEX".
    const m = /^(.*?)sha256:([0-9a-f]+)$/.exec(s);
    return m ? m[1] + 'sha256:' + m[2].slice(0, 12) : s;
  }

  // ---- the API ----

  class ApiError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  async function errorOf(res) {
    let code = '', message = res.status + ' ' + res.statusText;
    try {
      const body = await res.json();
      if (body && body.error) { code = body.error.code; message = body.error.message; }
    } catch { /* not JSON */ }
    return new ApiError(res.status, code, message);
  }

  async function api(method, path, body, opts) {
    const headers = { Authorization: 'Bearer ' + apiKey };
    let payload;
    if (body instanceof Blob || body instanceof ArrayBuffer) {
      payload = body;
      headers['Content-Type'] = 'application/wasm';
    } else if (body !== undefined) {
      payload = JSON.stringify(body);
      headers['Content-Type'] = 'application/json';
    }
    const res = await fetch(path, { method, headers, body: payload, cache: 'no-store', signal: opts && opts.signal });
    if (!res.ok) {
      const err = await errorOf(res);
      if (res.status === 401) signOut('Your key was refused: ' + err.message);
      throw err;
    }
    return res.status === 204 ? null : res.json();
  }

  // streamSSE reads a server-sent event stream through fetch (EventSource
  // cannot send the Authorization header), calling onEvent({event, id, data})
  // for each event; it resolves when the stream ends.
  async function streamSSE(path, { lastEventId, signal, onEvent, onOpen }) {
    const headers = { Authorization: 'Bearer ' + apiKey, Accept: 'text/event-stream' };
    if (lastEventId) headers['Last-Event-ID'] = lastEventId;
    const res = await fetch(path, { headers, signal, cache: 'no-store' });
    if (!res.ok) {
      const err = await errorOf(res);
      if (res.status === 401) signOut('Your key was refused: ' + err.message);
      throw err;
    }
    if (onOpen) onOpen();
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let ev = { event: 'message', id: '', data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        let line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (ev.data.length) {
            let data = ev.data.join('\n');
            try { data = JSON.parse(data); } catch { /* [DONE] and the like */ }
            onEvent({ event: ev.event, id: ev.id, data });
          }
          ev = { event: 'message', id: '', data: [] };
          continue;
        }
        if (line.startsWith(':')) continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let val = c < 0 ? '' : line.slice(c + 1);
        if (val.startsWith(' ')) val = val.slice(1);
        if (field === 'event') ev.event = val;
        else if (field === 'data') ev.data.push(val);
        else if (field === 'id') ev.id = val;
      }
    }
  }

  // ---- Markdown, rendered safely ----
  // A small renderer for what models write: paragraphs, headings, lists,
  // quotes, fenced code, emphasis, code spans and links. It never parses
  // HTML: tags show as text. Links keep only http, https and mailto
  // targets (anything else stays text); images become links to them.

  function safeURL(raw) {
    const s = raw.trim();
    if (!/^(https?:\/\/|mailto:)/i.test(s)) return null;
    try {
      const u = new URL(s);
      return ['http:', 'https:', 'mailto:'].includes(u.protocol) ? u.href : null;
    } catch { return null; }
  }

  function link(url, label, cls) {
    const href = safeURL(url);
    if (!href) return null;
    return h('a', { href, rel: 'noopener noreferrer nofollow', target: '_blank', class: cls }, label);
  }

  // inline renders a line's inline markup into nodes.
  function inline(src) {
    const out = [];
    let text = '';
    const flush = () => { if (text) { out.push(text); text = ''; } };
    let i = 0;
    while (i < src.length) {
      const ch = src[i];
      if (ch === '\\' && i + 1 < src.length && /[\\`*_[\]()!#>+\-.{}<]/.test(src[i + 1])) {
        text += src[i + 1]; i += 2; continue;
      }
      if (ch === '`') {
        const j = src.indexOf('`', i + 1);
        if (j > i) { flush(); out.push(h('code', null, src.slice(i + 1, j))); i = j + 1; continue; }
      }
      if (ch === '[' || (ch === '!' && src[i + 1] === '[')) {
        const image = ch === '!';
        const start = image ? i + 1 : i;
        const close = src.indexOf(']', start + 1);
        if (close > start && src[close + 1] === '(') {
          const end = src.indexOf(')', close + 2);
          if (end > close) {
            const label = src.slice(start + 1, close);
            const url = src.slice(close + 2, end).split(/\s+/)[0] || '';
            const a = image ? link(url, label || url, 'image-link') : link(url, inline(label));
            flush();
            out.push(a || src.slice(i, end + 1));
            i = end + 1;
            continue;
          }
        }
      }
      // (An underscore inside a word, as in post_id, is not emphasis.)
      const opens = ch === '*' || (ch === '_' && !wordChar(src[i - 1]));
      const closes = (j, n) => ch === '*' || !wordChar(src[j + n]);
      if (opens && src[i + 1] === ch) {
        let j = src.indexOf(ch + ch, i + 2);
        while (j > 0 && !closes(j, 2)) j = src.indexOf(ch + ch, j + 1);
        if (j > i + 2) { flush(); out.push(h('strong', null, inline(src.slice(i + 2, j)))); i = j + 2; continue; }
      }
      if (opens && src[i + 1] && src[i + 1] !== ' ' && src[i + 1] !== ch) {
        let j = src.indexOf(ch, i + 1);
        while (j > 0 && !closes(j, 1)) j = src.indexOf(ch, j + 1);
        if (j > i + 1 && src[j - 1] !== ' ') { flush(); out.push(h('em', null, inline(src.slice(i + 1, j)))); i = j + 1; continue; }
      }
      text += ch;
      i++;
    }
    flush();
    return out;
  }

  function wordChar(c) { return c !== undefined && /[\p{L}\p{N}]/u.test(c); }

  function markdown(src) {
    const frag = document.createDocumentFragment();
    const lines = src.replace(/\r\n?/g, '\n').split('\n');
    let para = [];
    let list = null; // {el, ordered}
    const endPara = () => {
      if (para.length) {
        const p = h('p');
        para.forEach((l, k) => { if (k) p.append(h('br')); append(p, [inline(l)]); });
        frag.append(p);
        para = [];
      }
    };
    const endList = () => { if (list) { frag.append(list.el); list = null; } };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      const fence = /^\s*(```|~~~)\s*([\w+-]*)\s*$/.exec(line);
      if (fence) {
        endPara(); endList();
        const body = [];
        let j = i + 1;
        while (j < lines.length && !lines[j].trim().startsWith(fence[1])) body.push(lines[j++]);
        frag.append(h('pre', null, h('code', fence[2] ? { 'data-lang': fence[2] } : null, body.join('\n'))));
        i = j;
        continue;
      }
      if (/^\s*$/.test(line)) { endPara(); endList(); continue; }
      const heading = /^(#{1,6})\s+(.*)$/.exec(line);
      if (heading) { endPara(); endList(); frag.append(h('h' + Math.min(heading[1].length + 2, 6), null, inline(heading[2]))); continue; }
      if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) { endPara(); endList(); frag.append(h('hr')); continue; }
      const quote = /^\s*>\s?(.*)$/.exec(line);
      if (quote) { endPara(); endList(); frag.append(h('blockquote', null, inline(quote[1]))); continue; }
      const item = /^\s*(?:([-*+])|(\d+)[.)])\s+(.*)$/.exec(line);
      if (item) {
        endPara();
        const ordered = !item[1];
        if (!list || list.ordered !== ordered) { endList(); list = { el: h(ordered ? 'ol' : 'ul'), ordered }; }
        list.el.append(h('li', null, inline(item[3])));
        continue;
      }
      endList();
      para.push(line);
    }
    endPara(); endList();
    return frag;
  }

  // ---- code points: offsets of the progress events count them ----

  function cpLength(s) { let n = 0; for (const _ of s) n++; return n; }
  function cpSlice(s, from) { return Array.from(s).slice(from).join(''); }

  // ---- sign in / out ----

  function showSignin(message) {
    document.getElementById('app').hidden = true;
    const form = document.getElementById('signin');
    form.hidden = false;
    const err = document.getElementById('signin-error');
    err.hidden = !message;
    err.textContent = message || '';
    document.getElementById('api-key').focus();
  }

  function signOut(message) {
    apiKey = '';
    sessionStorage.removeItem(KEY);
    stopFeed();
    if (current) { current.unmount(); current = null; }
    clear(document.getElementById('view'));
    showSignin(message);
  }

  async function signIn(key) {
    apiKey = key;
    try {
      const res = await fetch('/v1/sessions?limit=1', { headers: { Authorization: 'Bearer ' + key }, cache: 'no-store' });
      if (!res.ok) throw await errorOf(res);
    } catch (e) {
      apiKey = '';
      showSignin(e.status === 401 ? 'That key is not valid.' : 'Cannot sign in: ' + e.message);
      return;
    }
    sessionStorage.setItem(KEY, key);
    start();
  }

  // ---- correlation: session, run and trace ids ----

  // consoleConfig is the server's /console/config.json: whether runs are
  // traced, and the link to a trace.
  let consoleConfig = { tracing: false };
  const configLoaded = fetch('/console/config.json', { cache: 'no-store' })
    .then((res) => (res.ok ? res.json() : null)).then((c) => { if (c) consoleConfig = c; }).catch(() => {});

  // traceIdOf is a run's OpenTelemetry trace id, as the host derives it:
  // the first 16 bytes of SHA-256("agentic-run:" + run id), in hex. It is
  // null where the page cannot hash (an insecure context) or runs are not
  // traced.
  async function traceIdOf(runId) {
    await configLoaded;
    if (!consoleConfig.tracing || !runId || !(window.crypto && crypto.subtle)) return null;
    const sum = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode('agentic-run:' + runId)));
    return Array.from(sum.slice(0, 16), (b) => b.toString(16).padStart(2, '0')).join('');
  }

  // idChip shows an id with a button that copies it.
  function idChip(label, id, cls, href) {
    const copy = h('button', { class: 'copy', type: 'button', title: 'Copy ' + label, 'aria-label': 'Copy ' + label }, 'copy');
    copy.addEventListener('click', async () => {
      try {
        await navigator.clipboard.writeText(id);
        copy.textContent = 'copied';
      } catch (e) { copy.textContent = 'select it'; }
      setTimeout(() => { copy.textContent = 'copy'; }, 1500);
    });
    const value = href ? h('a', { class: 'mono id-value', href, target: '_blank', rel: 'noopener noreferrer' }, id) : h('code', { class: 'id-value' }, id);
    return h('span', { class: 'id-chip ' + cls, 'data-id': id }, label + ' ', value, ' ', copy);
  }

  // correlation is a response's (or an error's) session, run and trace,
  // the trace filled in once hashed, linked by the configuration's
  // trace_url.
  function correlation(sessionId, runId) {
    const el = h('div', { class: 'correlation' }, idChip('session', sessionId, 'session-id'), runId ? idChip('run', runId, 'run-id') : null);
    traceIdOf(runId).then((tid) => {
      if (!tid) return;
      const href = consoleConfig.trace_url ? consoleConfig.trace_url.replace('{trace_id}', tid) : null;
      el.append(idChip('trace', tid, 'trace-id', href));
    });
    return el;
  }

  function start() {
    document.getElementById('signin').hidden = true;
    document.getElementById('app').hidden = false;
    startFeed();
    route();
  }

  // ---- the tenant's feed of changes ----

  let feedAbort = null;

  function startFeed() {
    stopFeed();
    const ctl = new AbortController();
    feedAbort = ctl;
    const dot = document.getElementById('feed-state');
    (async () => {
      let delay = 500;
      while (!ctl.signal.aborted) {
        try {
          await streamSSE('/v1/feed', {
            signal: ctl.signal,
            onOpen: () => { dot.classList.add('live'); delay = 500; notify({ type: 'resync' }); },
            onEvent: (ev) => {
              if (ev.event === 'change') notify(ev.data);
              else if (ev.event === 'resync') notify({ type: 'resync' });
            },
          });
        } catch (e) {
          if (ctl.signal.aborted || e.status === 401) return;
        }
        dot.classList.remove('live');
        await sleep(delay, ctl.signal);
        delay = Math.min(delay * 2, 10000);
      }
    })();
  }

  function stopFeed() {
    if (feedAbort) feedAbort.abort();
    feedAbort = null;
  }

  function notify(change) {
    for (const fn of feedListeners) fn(change);
    refreshApprovalCount();
  }

  function sleep(ms, signal) {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, ms);
      if (signal) signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
    });
  }

  // debounce coalesces calls into one after ms.
  function debounce(fn, ms) {
    let t = null;
    return () => { clearTimeout(t); t = setTimeout(fn, ms); };
  }

  // every runs fn now and every ms (the lists of other hosts' runs change
  // without this server's feed knowing), and on every feed change; it
  // returns the function that stops it.
  function every(fn, ms) {
    const later = debounce(fn, 150);
    const timer = setInterval(fn, ms);
    feedListeners.add(later);
    fn();
    return () => { clearInterval(timer); feedListeners.delete(later); };
  }

  let countBusy = false;
  const refreshApprovalCount = debounce(async () => {
    if (!apiKey || countBusy) return;
    countBusy = true;
    try {
      const { approvals } = await api('GET', '/v1/approvals');
      const el = document.getElementById('approvals-count');
      el.hidden = approvals.length === 0;
      el.textContent = String(approvals.length);
    } catch { /* shown on the approvals page */ } finally { countBusy = false; }
  }, 200);

  // ---- routing ----

  function route() {
    if (!apiKey) { showSignin(); return; }
    if (current) { current.unmount(); current = null; }
    const view = document.getElementById('view');
    clear(view);
    const hash = location.hash || '#/sessions';
    for (const a of document.querySelectorAll('.top nav a')) {
      a.classList.toggle('active', hash === a.getAttribute('href') || hash.startsWith(a.getAttribute('href') + '/'));
    }
    let m;
    if ((m = /^#\/sessions\/(.+)$/.exec(hash))) current = sessionView(view, decodeURIComponent(m[1]));
    else if (hash === '#/approvals') current = approvalsView(view);
    else if (hash === '#/usage') current = usageView(view);
    else if (hash === '#/plugins') current = pluginsView(view);
    else if (hash === '#/webhooks') current = webhooksView(view);
    else current = sessionsView(view);
    refreshApprovalCount();
  }

  function errorBox(e) { return h('p', { class: 'error', role: 'alert' }, e.message || String(e)); }

  // ---- sessions ----

  function sessionsView(root) {
    const filter = h('input', { id: 'session-filter', type: 'search', placeholder: 'Filter by session id', 'aria-label': 'Filter by session id' });
    const stateFilter = h('select', { id: 'state-filter', 'aria-label': 'Filter by state' },
      h('option', { value: '' }, 'every state'),
      ['running', 'approval_required', 'queued', 'timed_out', 'failed', 'interrupted', 'cancelled', 'completed', 'idle']
        .map((s) => h('option', { value: s }, s.replace(/_/g, ' '))));
    const open = h('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); const id = openID.value.trim(); if (id) location.hash = '#/sessions/' + encodeURIComponent(id); } });
    const openID = h('input', { id: 'session-open', placeholder: 'session id', 'aria-label': 'Open a session by id' });
    append(open, [openID, h('button', { id: 'session-open-submit', type: 'submit' }, 'Open or start a session')]);
    const body = h('tbody');
    const table = h('table', { id: 'sessions' },
      h('thead', null, h('tr', null, h('th', null, 'Session'), h('th', null, 'State'), h('th', null, 'Last activity'),
        h('th', { class: 'num' }, 'Tokens'), h('th', { class: 'num' }, 'Cost'))), body);
    const status = h('p', { class: 'muted' });
    // The tasks other agents started through A2A: each a run, its context
    // a session (GET /v1/a2a/tasks).
    const a2aBody = h('tbody');
    const a2aStatus = h('p', { class: 'muted', id: 'a2a-status' });
    const a2aTable = h('table', { id: 'a2a-tasks' },
      h('thead', null, h('tr', null, h('th', null, 'Task'), h('th', null, 'Context'), h('th', null, 'Agent'),
        h('th', null, 'State'), h('th', null, 'Started'))), a2aBody);
    // The schedules that send messages into sessions (GET /v1/schedules):
    // each with its next occurrence and what became of its last one.
    const schedBody = h('tbody');
    const schedStatus = h('p', { class: 'muted', id: 'schedules-status' });
    const schedTable = h('table', { id: 'schedules' },
      h('thead', null, h('tr', null, h('th', null, 'Schedule'), h('th', null, 'Session'), h('th', null, 'When'),
        h('th', null, 'Next'), h('th', null, 'Last'))), schedBody);
    append(root, [h('h2', null, 'Sessions'), h('div', { class: 'toolbar' }, filter, stateFilter), open, status, table,
      h('h2', null, 'Schedules'), schedStatus, schedTable, h('h2', null, 'A2A tasks'), a2aStatus, a2aTable]);
    let a2aContexts = new Set();
    let rows = [];
    let more = false; // sessions past the pages read
    const maxPages = 5;
    const apply = () => {
      const q = filter.value.trim().toLowerCase();
      const st = stateFilter.value;
      let shown = 0;
      for (const tr of body.children) {
        const ok = (!q || tr.dataset.session.toLowerCase().includes(q)) && (!st || tr.dataset.state === st);
        tr.hidden = !ok;
        if (ok) shown++;
      }
      status.textContent = !rows.length ? 'No sessions yet: open one above to start.'
        : `${shown} of ${rows.length} sessions` + (more ? ` (the first ${rows.length} by id; open others by id above)` : '');
    };
    filter.addEventListener('input', apply);
    stateFilter.addEventListener('change', apply);
    let busy = false;
    const load = async () => {
      if (busy) return;
      busy = true;
      try {
        // Up to maxPages pages of the API's (which reads each session it
        // lists): a tenant with more sessions finds the rest by id.
        const all = [];
        let after = '';
        more = false;
        for (let page = 0; page < maxPages; page++) {
          const res = await api('GET', '/v1/sessions?limit=200' + (after ? '&after=' + encodeURIComponent(after) : ''));
          all.push(...res.sessions);
          if (!res.next) break;
          after = res.next;
          more = page === maxPages - 1;
        }
        all.sort((a, b) => String(b.last_activity || '').localeCompare(String(a.last_activity || '')));
        rows = all;
        clear(body);
        try {
          const res = await api('GET', '/v1/a2a/tasks?limit=50');
          a2aContexts = new Set(res.tasks.map((t) => t.context_id));
          clear(a2aBody);
          for (const t of res.tasks) {
            a2aBody.append(h('tr', { 'data-task': t.task_id, 'data-context': t.context_id, 'data-state': t.state },
              h('td', { class: 'mono' }, t.task_id),
              h('td', null, h('a', { class: 'session-link', href: '#/sessions/' + encodeURIComponent(t.context_id) }, t.context_id)),
              h('td', null, t.agent),
              h('td', null, h('span', { class: 'state a2a-state', 'data-state': t.state, title: t.reason || '' }, t.state)),
              h('td', { class: 'activity' }, fmtTime(t.at))));
          }
          a2aStatus.textContent = res.tasks.length ? `the latest ${res.tasks.length} tasks started through A2A` : 'No task came through A2A yet.';
        } catch (e) {
          a2aStatus.textContent = 'Cannot list the A2A tasks: ' + e.message;
        }
        try {
          const res = await api('GET', '/v1/schedules');
          clear(schedBody);
          for (const x of res.schedules) {
            const last = x.last;
            schedBody.append(h('tr', { 'data-schedule': x.id, 'data-source': x.source, 'data-outcome': last ? last.outcome : '' },
              h('td', null, h('span', { class: 'mono' }, x.id), x.source === 'config' ? h('span', { class: 'via', title: 'from the configuration: read-only here' }, 'config') : null),
              h('td', null, h('a', { class: 'session-link', href: '#/sessions/' + encodeURIComponent(x.session) }, x.session)),
              h('td', null, h('code', null, x.cron), ' ', h('span', { class: 'muted' }, x.timezone)),
              h('td', { class: 'next' }, fmtTime(x.next)),
              h('td', { class: 'last', title: last && last.message_id ? 'message ' + last.message_id + (last.run_id ? ', run ' + last.run_id : '') : '' },
                last ? [h('span', { class: 'outcome' + (last.outcome === 'sent' ? '' : ' muted') }, last.outcome), ' ', fmtTime(last.occurrence)] : h('span', { class: 'muted' }, 'not yet'))));
          }
          schedStatus.textContent = res.schedules.length ? '' : 'No schedules (schedules: in the configuration, or POST /v1/schedules).';
        } catch (e) {
          schedStatus.textContent = 'Cannot list the schedules: ' + e.message;
        }
        for (const s of all) {
          const st = s.status || {};
          body.append(h('tr', { 'data-session': s.id, 'data-state': st.state },
            h('td', null, h('a', { class: 'session-link', href: '#/sessions/' + encodeURIComponent(s.id) }, s.id),
              a2aContexts.has(s.id) ? h('span', { class: 'via', title: 'a context of tasks started through A2A' }, 'A2A') : null),
            h('td', null, stateBadge(st.state, { title: st.reason || '' }), st.queued ? h('span', { class: 'muted' }, ` +${st.queued} queued`) : null),
            h('td', { class: 'activity' }, fmtTime(s.last_activity)),
            h('td', { class: 'num tokens' }, fmtInt(s.usage && s.usage.total_tokens)),
            h('td', { class: 'num cost' }, fmtCost(s.cost))));
        }
        apply();
      } catch (e) {
        status.textContent = 'Cannot list the sessions: ' + e.message;
      } finally { busy = false; }
    };
    const stop = every(load, 5000);
    return { unmount: stop };
  }

  // ---- one session: its live transcript ----

  function sessionView(root, id) {
    const ctl = new AbortController();
    const section = h('section', { id: 'session', 'data-session': id });
    const stateEl = h('span', { id: 'session-state', class: 'state', 'data-state': '' }, '…');
    const reasonEl = h('span', { class: 'muted' });
    const cancelBtn = h('button', { id: 'cancel', type: 'button', class: 'danger', disabled: true }, 'Cancel run');
    // A run a host left interrupted (its agent's on_interrupted: leave)
    // goes on where it stopped.
    const resumeBtn = h('button', { id: 'resume', type: 'button', disabled: true, title: 'go on with the interrupted run where it stopped' }, 'Resume run');
    const transcriptEl = h('div', { id: 'transcript' });
    // A fork names the session it was made from (its forked_from).
    const lineageEl = h('p', { id: 'lineage', class: 'muted', hidden: true });
    const approvalsEl = h('div', { id: 'session-approvals' });
    const message = h('textarea', { id: 'message', placeholder: 'Send a message (Ctrl+Enter)', 'aria-label': 'Message' });
    const sendBtn = h('button', { id: 'send', type: 'submit' }, 'Send');
    // While a run works, a message may stop it instead of joining it: the
    // run is cancelled (what it did kept) and a run of its own answers.
    const interruptBtn = h('button', { id: 'send-interrupt', type: 'button', disabled: true,
      title: 'cancel the run in flight (what it did is kept) and answer this message in a run of its own' }, 'Send & interrupt');
    const errEl = h('p', { class: 'error', role: 'alert', hidden: true });
    const composer = h('form', { class: 'composer' }, message, sendBtn, interruptBtn);
    append(section, [
      h('div', { class: 'session-head' }, h('a', { href: '#/sessions' }, '← Sessions'), h('h2', null, id), stateEl, reasonEl, resumeBtn, cancelBtn),
      lineageEl, approvalsEl, transcriptEl, errEl, composer]);
    root.append(section);

    let items = [];        // the transcript's items, as the API gives them
    let lastId = '';       // the last event id read, for Last-Event-ID
    let exists = null;     // whether the session exists (null: not known yet)
    let tools = {};        // tool name → declared effect, from the plugins
    const itemEls = new Map();

    const showError = (e) => { errEl.hidden = !e; errEl.textContent = e ? (e.message || String(e)) : ''; };

    const notFound = () => {
      exists = false;
      clear(section);
      append(section, [h('div', { id: 'not-found' }, h('h2', null, 'Session not found'),
        h('p', null, `There is no session ${JSON.stringify(id)} for this key's tenant: not found.`),
        h('p', null, h('a', { href: '#/sessions' }, 'Back to the sessions')))]);
    };

    const setState = (st) => {
      if (!st) return;
      stateEl.dataset.state = st.state;
      stateEl.textContent = (st.state || '').replace(/_/g, ' ');
      reasonEl.textContent = st.reason ? (st.timeout ? `${st.reason} (${st.timeout} timeout)` : st.reason) : '';
      cancelBtn.disabled = !['running', 'queued', 'approval_required', 'interrupted'].includes(st.state);
      resumeBtn.disabled = st.state !== 'interrupted';
      interruptBtn.disabled = !['running', 'approval_required', 'waiting'].includes(st.state);
    };

    // setLineage shows where the session was forked from (forked_from)
    // and the sessions forked from it (forks; undefined: as shown).
    let lineage = { from: null, forks: [] };
    const setLineage = (f, forks) => {
      lineage = { from: f || null, forks: forks === undefined ? lineage.forks : (forks || []) };
      const parts = [];
      if (lineage.from) {
        const at = lineage.from.item || lineage.from.at;
        parts.push(h('span', { class: 'forked-from' }, 'Forked from ',
          h('a', { class: 'fork-source', href: '#/sessions/' + encodeURIComponent(lineage.from.source) }, lineage.from.source),
          ' at ', h('code', { class: 'fork-at' }, at),
          lineage.from.model ? ' with ' + lineage.from.model : '', lineage.from.agent ? ' (agent ' + lineage.from.agent + ')' : ''));
      }
      if (lineage.forks.length) {
        if (parts.length) parts.push(' · ');
        parts.push(h('span', { class: 'forks' }, 'Forks: ', ...lineage.forks.flatMap((fid, i) =>
          [i ? ', ' : '', h('a', { class: 'fork-link', href: '#/sessions/' + encodeURIComponent(fid) }, fid)])));
      }
      lineageEl.hidden = !parts.length;
      lineageEl.replaceChildren(...parts);
    };

    // forkAt makes a new session from this one's ledger up to the item
    // (a user message, answered anew; or a response, gone on from with
    // its recorded tool results) and opens it.
    const forkAt = async (it, btn) => {
      btn.disabled = true;
      try {
        const res = await api('POST', '/v1/sessions/' + encodeURIComponent(id) + '/fork', { at: it.id });
        location.hash = '#/sessions/' + encodeURIComponent(res.session_id);
      } catch (e) { showError(e); btn.disabled = false; }
    };

    // trafficSummary says in a few words what a plugin's call did through
    // the host's functions (as ledger.ToolTraffic.Summary does).
    const trafficSummary = (t) => {
      const parts = [];
      const n = (k, what) => k + ' ' + what + (k === 1 ? '' : (what.endsWith('s') ? 'es' : 's'));
      if ((t.http || []).length) parts.push(n(t.http.length, 'HTTP request'));
      if ((t.kv || []).length) parts.push(n(t.kv.length, 'KV access'));
      if (t.truncated) parts.push(fmtInt(t.dropped) + ' more not recorded');
      return parts.join(', ');
    };

    // renderTraffic lists a call's HTTP requests and key-value accesses in
    // the order they happened.
    const renderTraffic = (t) => {
      const rows = [];
      for (const x of t.http || []) {
        const answer = x.error ? 'error: ' + x.error : String(x.status || '');
        rows.push([x.seq || 0, h('tr', { class: 'traffic-http', 'data-seq': x.seq || 0 },
          h('td', { class: 'traffic-kind' }, 'http'),
          h('td', { class: 'traffic-method mono' }, x.method),
          h('td', { class: 'traffic-target mono', title: x.url }, x.url),
          h('td', { class: 'traffic-status' + (x.error || x.status >= 400 ? ' bad' : '') }, answer),
          h('td', { class: 'traffic-bytes num', title: 'sent / received' + (x.response_digest ? ' (' + x.response_digest + ')' : '') },
            fmtInt(x.request_bytes) + ' / ' + fmtInt(x.response_bytes) + ' B' + (x.body_omitted ? ' (body not recorded)' : '')),
          h('td', { class: 'traffic-duration muted' }, x.duration_ms ? x.duration_ms + ' ms' : ''))]);
      }
      for (const a of t.kv || []) {
        let what = '';
        if (a.error) what = 'error: ' + a.error;
        else if (a.op === 'get') what = a.found ? 'found' : 'not found';
        rows.push([a.seq || 0, h('tr', { class: 'traffic-kv', 'data-seq': a.seq || 0 },
          h('td', { class: 'traffic-kind' }, 'kv'),
          h('td', { class: 'traffic-method mono' }, a.op),
          h('td', { class: 'traffic-target mono' }, a.key !== undefined ? a.key : '(binary key)'),
          h('td', { class: 'traffic-status' + (a.error ? ' bad' : '') }, what),
          h('td', { class: 'traffic-bytes num', title: a.value_digest || '' }, a.value_bytes ? fmtInt(a.value_bytes) + ' B' : ''),
          h('td', null, ''))]);
      }
      rows.sort((p, q) => p[0] - q[0]);
      return h('table', { class: 'traffic' }, h('tbody', null, rows.map((r) => r[1])),
        t.truncated ? h('tfoot', null, h('tr', null, h('td', { colspan: 6, class: 'muted traffic-dropped' }, fmtInt(t.dropped) + ' more not recorded'))) : null);
    };

    const renderToolCall = (c) => {
      const effect = c.effect || tools[c.name] || '';
      const traffic = c.traffic && ((c.traffic.http || []).length || (c.traffic.kv || []).length || c.traffic.truncated) ? c.traffic : null;
      return h('details', { class: 'tool-call', 'data-call-id': c.id },
        h('summary', null,
          h('code', { class: 'tool-name' }, c.name),
          h('span', { class: 'tool-status', 'data-status': c.status }, c.status || 'running'),
          effect ? h('span', { class: 'tag tool-effect ' + effect }, effect) : h('span', { class: 'tool-effect', hidden: true }),
          h('span', { class: 'tag tool-source mono', title: c.source || '' }, shortHash(c.source)),
          h('span', { class: 'tool-duration muted' }, c.duration_ms !== undefined ? c.duration_ms + ' ms' : ''),
          c.fuel ? h('span', { class: 'tool-fuel muted', title: 'the fuel the plugin used: its CPU' }, fmtInt(c.fuel) + ' fuel') : null,
          c.policy_fuel ? h('span', { class: 'policy-fuel muted', title: 'the fuel the policies that decided on the call used' }, 'policy ' + fmtInt(c.policy_fuel) + ' fuel') : null,
          c.approval ? h('span', { class: 'tag tool-approval', 'data-approval': c.approval }, 'approval: ' + c.approval) : null,
          traffic ? h('span', { class: 'tag tool-traffic', title: 'what the plugin did through the host: HTTP requests and key-value accesses' }, trafficSummary(traffic)) : null,
          c.child_session ? h('a', { class: 'tag child-session', title: 'the sub-agent\'s child session', href: '#/sessions/' + encodeURIComponent(c.child_session) }, 'sub-agent: ' + c.child_session) : null),
        h('div', { class: 'muted' }, 'input'), h('pre', { class: 'tool-input' }, prettyJSON(c.input)),
        c.edited_input ? h('div', { class: 'muted' }, 'edited input (the call ran with it)' + (c.decided_by ? ', by ' + c.decided_by : '')) : null,
        c.edited_input ? h('pre', { class: 'tool-edited-input' }, prettyJSON(c.edited_input)) : null,
        h('div', { class: 'muted' }, 'output'), h('pre', { class: 'tool-output' }, c.output || ''),
        traffic ? h('div', { class: 'muted' }, 'traffic') : null,
        traffic ? renderTraffic(traffic) : null);
    };

    // renderItem builds (or rebuilds) one item's element.
    const renderItem = (it, live) => {
      const el = h('article', { class: 'item' + (live ? ' live' : ''), 'data-item-id': it.id, 'data-kind': it.kind, 'data-status': it.status || '' });
      const meta = h('div', { class: 'meta' },
        h('span', null, it.kind === 'user' ? 'user' : (it.model || 'assistant')),
        it.time ? h('time', { datetime: it.time }, fmtTime(it.time)) : null,
        it.kind === 'response' && it.status && it.status !== 'completed' ? h('span', { class: 'item-status' }, it.status) : null,
        live && it.retry ? h('span', { class: 'item-retry', title: it.retry.reason }, it.retry.fallback ?
          `falling back: ${it.retry.model} → ${it.retry.fallback}` : `retrying (attempt ${it.retry.attempt + 1})`) : null,
        it.usage ? h('span', null, `${fmtInt(it.usage.total_tokens)} tokens`) : null,
        it.cost ? h('span', null, fmtCost(it.cost)) : null);
      const text = h('div', { class: 'text' });
      if (it.kind === 'user') {
        if (it.parent) {
          text.append(h('div', { class: 'muted parent-call' }, 'task from ',
            h('a', { class: 'parent-session', href: '#/sessions/' + encodeURIComponent(it.parent.session_id) }, it.parent.session_id),
            it.parent.agent ? ' (' + it.parent.agent + ')' : ''));
        }
        append(text, [h('p', { class: 'plain' }, it.text)]);
        for (const p of it.parts || []) if (p.type && p.type !== 'text') text.append(h('span', { class: 'tag' }, p.type));
      } else {
        text.append(markdown(it.text || ''));
      }
      el.append(meta);
      if (it.reasoning) el.append(h('details', { class: 'reasoning' }, h('summary', null, 'reasoning'), it.reasoning));
      el.append(text);
      for (const c of it.tool_calls || []) el.append(renderToolCall(c));
      if (it.reason) el.append(h('div', { class: 'reason' }, it.reason));
      if (it.kind === 'response' && !live) el.append(correlation(id, it.run_id));
      // A settled user message or finished response can be forked.
      if (!live && it.run_id && (it.kind === 'user' || it.status === 'completed')) {
        const btn = h('button', { type: 'button', class: 'fork', 'data-fork-at': it.id,
          title: it.kind === 'user' ? 'a new session with everything before this message, answering it anew' :
            'a new session with everything up to this response, going on after it (no tool runs again)' }, 'Fork');
        btn.addEventListener('click', () => forkAt(it, btn));
        meta.append(btn);
      }
      return el;
    };

    let liveId = '';
    const draw = () => {
      // Only the latest response streaming now is live.
      const streaming = items.filter((it) => it.kind === 'response' && it.status === 'streaming');
      liveId = streaming.length ? streaming[streaming.length - 1].id : '';
      const keep = new Set();
      let prev = null;
      for (const it of items) {
        keep.add(it.id);
        const sig = JSON.stringify(it) + (it.id === liveId);
        let el = itemEls.get(it.id);
        if (!el || el.sig !== sig) {
          const fresh = renderItem(it, it.id === liveId);
          fresh.sig = sig;
          if (el) el.replaceWith(fresh); else transcriptEl.append(fresh);
          el = fresh;
          itemEls.set(it.id, el);
        }
        if (prev ? prev.nextSibling !== el : transcriptEl.firstChild !== el) {
          if (prev) prev.after(el); else transcriptEl.prepend(el);
        }
        prev = el;
      }
      for (const [k, el] of itemEls) if (!keep.has(k)) { el.remove(); itemEls.delete(k); }
      if (!items.length) {
        // (A session not found keeps its notice until a message starts it.)
        if (exists !== false) transcriptEl.replaceChildren(h('p', { class: 'muted', id: 'empty-transcript' }, 'No messages yet.'));
      }
      else { const e = document.getElementById('empty-transcript'); if (e) e.remove(); }
    };
    let frame = 0;
    const redraw = () => { if (!frame) frame = requestAnimationFrame(() => { frame = 0; draw(); }); };

    const itemById = (rid) => items.find((it) => it.id === rid);

    // mergeTranscript takes a transcript read with GET: everything but the
    // live text of the pass streaming now (which the event stream owns).
    const mergeTranscript = (tr) => {
      const next = tr.items || [];
      for (const it of next) {
        const old = itemById(it.id);
        if (old && old.status === 'streaming' && it.status === 'streaming') {
          it.text = old.text;
          it.reasoning = old.reasoning;
        }
      }
      items = next;
      redraw();
    };

    const refresh = debounce(async () => {
      if (exists === false) return;
      try {
        const [st, tr] = await Promise.all([
          api('GET', '/v1/sessions/' + encodeURIComponent(id), undefined, { signal: ctl.signal }),
          api('GET', '/v1/sessions/' + encodeURIComponent(id) + '/transcript', undefined, { signal: ctl.signal })]);
        setState(st.status);
        setLineage(st.forked_from, st.forks);
        mergeTranscript(tr);
        drawApprovals(st.status.approvals || []);
      } catch (e) {
        if (e.status === 404) notFound();
      }
    }, 120);

    const drawApprovals = (list) => {
      clear(approvalsEl);
      for (const a of list) approvalsEl.append(approvalCard(a, refresh));
    };

    const applyProgress = (p) => {
      switch (p.type) {
        case 'response-start': {
          if (!itemById(p.responseId)) items.push({ id: p.responseId, kind: 'response', run_id: p.runId, text: '', status: 'streaming' });
          stateEl.dataset.state = 'running'; stateEl.textContent = 'running';
          interruptBtn.disabled = false;
          break;
        }
        case 'text':
        case 'reasoning': {
          let it = itemById(p.responseId);
          if (!it) { it = { id: p.responseId, kind: 'response', run_id: p.runId, text: '', status: 'streaming' }; items.push(it); }
          const field = p.type === 'text' ? 'text' : 'reasoning';
          const have = it[field] || '';
          const n = cpLength(have);
          if (p.offset === n) it[field] = have + p.delta;
          else if (p.offset < n) {
            // Seen already in part (a snapshot reached past it): keep the new tail only.
            const over = n - p.offset;
            it[field] = have + cpSlice(p.delta, over);
          } else {
            // A gap: the stream missed text. Read the session again.
            reconnect(true);
            return;
          }
          it.status = 'streaming';
          break;
        }
        case 'retry': {
          // The attempt failed: what it streamed is void, and the next one
          // (on the same model, or the next of the agent's models) streams
          // into the same item from its start.
          const it = itemById(p.responseId);
          if (it && p.retry) {
            if (p.retry.reset) { it.text = ''; it.reasoning = ''; it.tool_calls = []; }
            it.retry = p.retry;
          }
          break;
        }
        case 'tool-start':
        case 'tool-end': {
          const it = itemById(p.responseId);
          if (it && p.tool) {
            it.tool_calls = it.tool_calls || [];
            let c = it.tool_calls.find((x) => x.id === p.tool.callId);
            if (!c) { c = { id: p.tool.callId, name: p.tool.name, input: p.tool.input, status: 'running' }; it.tool_calls.push(c); }
            if (p.type === 'tool-end') { c.output = p.tool.output; c.status = p.tool.isError ? 'error' : 'done'; refresh(); }
          }
          break;
        }
        case 'run-end':
        case 'approval-requested':
        case 'approval-decided':
          refresh();
          break;
      }
      redraw();
    };

    let streamCtl = null;
    const reconnect = (fresh) => {
      if (streamCtl) streamCtl.abort();
      if (fresh) lastId = '';
      follow();
    };

    const follow = async () => {
      const sc = new AbortController();
      streamCtl = sc;
      ctl.signal.addEventListener('abort', () => sc.abort(), { once: true });
      let delay = 300;
      while (!sc.signal.aborted) {
        try {
          await streamSSE('/v1/sessions/' + encodeURIComponent(id) + '/events', {
            lastEventId: lastId, signal: sc.signal,
            onOpen: () => { delay = 300; showError(null); },
            onEvent: (ev) => {
              if (ev.id) lastId = ev.id;
              if (ev.event === 'snapshot') {
                exists = true;
                transcriptEl.dataset.live = 'true';
                items = (ev.data.transcript && ev.data.transcript.items) || [];
                setLineage(ev.data.transcript && ev.data.transcript.forked_from);
                setState(ev.data.status);
                drawApprovals((ev.data.status && ev.data.status.approvals) || []);
                redraw();
              } else if (ev.event === 'progress') {
                applyProgress(ev.data);
              } else if (ev.event === 'error' && ev.data && ev.data.code === 'too_slow') {
                // reconnect from lastId below
              }
            },
          });
        } catch (e) {
          delete transcriptEl.dataset.live;
          if (sc.signal.aborted) return;
          if (e.status === 404) {
            // No such session yet (or another tenant's): a new id starts
            // when a message is sent.
            if (!sentHere) { notFound(); return; }
          } else if (e.status === 401) {
            return;
          } else {
            showError(new Error('The live stream broke off (' + e.message + '); reconnecting…'));
          }
        }
        await sleep(delay, sc.signal);
        delay = Math.min(delay * 2, 5000);
      }
    };

    let sentHere = false;
    const send = async (overlap) => {
      const text = message.value.trim();
      if (!text) return;
      sendBtn.disabled = true;
      try {
        await api('POST', '/v1/sessions/' + encodeURIComponent(id) + '/messages', { text, overlap });
        message.value = '';
        showError(null);
        if (exists !== true) { sentHere = true; exists = true; transcriptEl.replaceChildren(); reconnect(true); }
      } catch (e) {
        showError(e);
      } finally { sendBtn.disabled = false; }
    };
    composer.addEventListener('submit', (e) => { e.preventDefault(); send(); });
    interruptBtn.addEventListener('click', () => send('interrupt'));
    message.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send(); } });
    resumeBtn.addEventListener('click', async () => {
      resumeBtn.disabled = true;
      try { await api('POST', '/v1/sessions/' + encodeURIComponent(id) + '/resume'); refresh(); } catch (e) { showError(e); }
    });
    cancelBtn.addEventListener('click', async () => {
      cancelBtn.disabled = true;
      try { await api('POST', '/v1/sessions/' + encodeURIComponent(id) + '/cancel', { reason: 'cancelled from the console' }); refresh(); } catch (e) { showError(e); }
    });

    api('GET', '/v1/plugins', undefined, { signal: ctl.signal }).then((res) => {
      for (const p of res.plugins) for (const t of p.tools || []) tools[t.name] = t.effect;
      redraw();
    }).catch(() => {});
    // The session's page opens on a session that may not exist yet: a
    // first GET tells "not found" from "not started".
    api('GET', '/v1/sessions/' + encodeURIComponent(id), undefined, { signal: ctl.signal }).then((st) => { exists = true; setLineage(st.forked_from, st.forks); follow(); }, (e) => {
      if (e.status === 404) {
        exists = false;
        transcriptEl.replaceChildren(h('div', { id: 'not-found' }, h('h2', null, 'Session not found'),
          h('p', null, `There is no session ${JSON.stringify(id)} for this key's tenant: not found. Send a message to start it.`)));
      } else showError(e);
    });
    const stopFeed = (() => {
      const fn = (c) => { if (c.session_id === id && c.type !== 'run-start') refresh(); };
      feedListeners.add(fn);
      return () => feedListeners.delete(fn);
    })();
    return { unmount: () => { ctl.abort(); stopFeed(); if (frame) cancelAnimationFrame(frame); } };
  }

  // ---- approvals ----

  function approvalCard(a, after) {
    const reason = h('input', { class: 'approval-reason', placeholder: 'Reason (optional)', 'aria-label': 'Reason' });
    const err = h('span', { class: 'error', role: 'alert' });
    const approve = h('button', { class: 'approve', type: 'button' }, 'Approve');
    const deny = h('button', { class: 'deny danger', type: 'button' }, 'Deny');
    const respondText = h('input', { class: 'approval-response', placeholder: 'Or answer in the tool\'s place (the tool does not run)', 'aria-label': 'Response' });
    const respond = h('button', { class: 'respond', type: 'button' }, 'Respond');
    const card = h('div', { class: 'approval', 'data-approval-id': a.approval_id },
      h('div', null, h('strong', { class: 'approval-tool' }, a.tool || (a.kind || '').replace(/_/g, ' ')), ' ',
        a.effect ? h('span', { class: 'tag ' + a.effect }, a.effect) : null, ' ',
        h('span', { class: 'muted' }, 'in '), h('a', { class: 'approval-session', href: '#/sessions/' + encodeURIComponent(a.session_id) }, a.session_id),
        h('span', { class: 'muted' }, ' · asked ' + fmtTime(a.requested_at) + (a.expires_at ? ' · expires ' + fmtTime(a.expires_at) : ''))),
      h('p', { class: 'approval-summary' }, a.summary || '(the policy gave no summary)'),
      a.reason ? h('p', { class: 'muted' }, 'Why: ' + a.reason) : null,
      // A call's input may be edited before approving: the call then runs
      // with the edited input (the server checks it against the tool's
      // schema); or the call may be answered in the tool's place.
      a.call_id ? h('textarea', { class: 'approval-input mono', rows: 4, spellcheck: 'false', 'aria-label': 'Input (edit to approve with another)' }, prettyJSON(a.input)) : null,
      h('div', { class: 'row' }, reason, approve, deny, err),
      a.call_id ? h('div', { class: 'row' }, respondText, respond) : null);
    const buttons = [approve, deny, respond];
    const decide = async (body) => {
      for (const b of buttons) b.disabled = true;
      try {
        await api('POST', '/v1/approvals/' + encodeURIComponent(a.approval_id), Object.assign({ reason: reason.value.trim() || undefined, by: 'console' }, body));
        card.remove();
        if (after) after();
        notify({ type: 'approval-decided', approval_id: a.approval_id, session_id: a.session_id });
      } catch (e) {
        err.textContent = e.message;
        if (e.status === 409 || e.status === 404) setTimeout(() => { card.remove(); if (after) after(); }, 1500);
        else for (const b of buttons) b.disabled = false;
      }
    };
    approve.addEventListener('click', () => {
      const box = card.querySelector('textarea.approval-input');
      if (!box) return decide({ approve: true });
      let edited;
      try { edited = JSON.parse(box.value); } catch (e) { err.textContent = 'The input is not JSON: ' + e.message; return; }
      // The model's input as asked, unless the person changed it.
      const same = JSON.stringify(edited) === JSON.stringify(a.input === undefined ? {} : a.input);
      decide(same ? { approve: true } : { approve: true, input: edited });
    });
    deny.addEventListener('click', () => decide({ approve: false }));
    respond.addEventListener('click', () => {
      const text = respondText.value.trim();
      if (!text) { err.textContent = 'Write the answer the model should read in the tool\'s place.'; return; }
      decide({ response: text });
    });
    return card;
  }

  function approvalsView(root) {
    const list = h('div', { id: 'approvals' });
    const empty = h('p', { id: 'approvals-empty', class: 'muted', hidden: true }, 'Nothing waits for a decision.');
    const errEl = h('p', { class: 'error', role: 'alert' });
    append(root, [h('h2', null, 'Approvals'), errEl, empty, list]);
    let busy = false;
    const load = async () => {
      if (busy) return;
      busy = true;
      try {
        const { approvals } = await api('GET', '/v1/approvals');
        errEl.textContent = '';
        const want = new Set(approvals.map((a) => a.approval_id));
        for (const el of [...list.children]) if (!want.has(el.dataset.approvalId)) el.remove();
        const have = new Set([...list.children].map((el) => el.dataset.approvalId));
        approvals.sort((a, b) => String(a.requested_at).localeCompare(String(b.requested_at)));
        for (const a of approvals) if (!have.has(a.approval_id)) list.append(approvalCard(a, load));
        empty.hidden = list.children.length > 0;
      } catch (e) {
        errEl.textContent = 'Cannot read the approvals: ' + e.message;
      } finally { busy = false; }
    };
    return { unmount: every(load, 3000) };
  }

  // ---- cost and usage ----

  const SVG = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return el;
  }

  // barChart draws one bar per day; a budget draws its line and marks
  // the days past it.
  function barChart(days, value, label, budget) {
    const W = 720, H = 200, L = 56, B = 34, T = 12;
    const max = Math.max(budget || 0, ...days.map(value), 0) || 1;
    const bw = (W - L - 8) / days.length;
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label });
    svg.append(s('title', null, label));
    const y = (v) => T + (H - T - B) * (1 - v / max);
    for (const f of [0, 0.5, 1]) {
      svg.append(s('line', { x1: L, x2: W - 4, y1: y(max * f), y2: y(max * f), stroke: '#e5e6ea' }));
      svg.append(s('text', { x: L - 6, y: y(max * f) + 3, 'text-anchor': 'end' }, label.startsWith('Cost') ? fmtCost(max * f) : fmtInt(Math.round(max * f))));
    }
    days.forEach((d, i) => {
      const v = value(d);
      const x = L + i * bw + 2;
      const bar = s('rect', { class: 'bar' + (budget && v >= budget ? ' over' : ''), x, y: y(v), width: Math.max(bw - 4, 1), height: Math.max(y(0) - y(v), v > 0 ? 1 : 0), 'data-day': d.day });
      bar.append(s('title', null, `${d.day}: ${label.startsWith('Cost') ? fmtCost(v) : fmtInt(v)}`));
      svg.append(bar);
      if (days.length <= 16 || i % Math.ceil(days.length / 16) === 0) {
        svg.append(s('text', { x: x + bw / 2 - 2, y: H - B + 14, 'text-anchor': 'middle' }, d.day.slice(5)));
      }
    });
    if (budget) {
      svg.append(s('line', { class: 'budget', x1: L, x2: W - 4, y1: y(budget), y2: y(budget) }));
      svg.append(s('text', { x: W - 6, y: y(budget) - 4, 'text-anchor': 'end' }, 'budget ' + fmtCost(budget) + '/day'));
    }
    return svg;
  }

  function usageView(root) {
    const days = h('select', { id: 'usage-days-select', 'aria-label': 'Period' }, [7, 14, 30, 90].map((n) => h('option', { value: n, selected: n === 14 }, `last ${n} days`)));
    const body = h('div');
    append(root, [h('h2', null, 'Cost and usage'), h('div', { class: 'toolbar' }, days), body]);
    const figures = (f) => [h('td', { class: 'num' }, fmtInt(f.steps)), h('td', { class: 'num' }, fmtInt(f.usage.prompt_tokens)),
      h('td', { class: 'num' }, fmtInt(f.usage.completion_tokens)), h('td', { class: 'num' }, fmtInt(f.usage.total_tokens)), h('td', { class: 'num' }, fmtCost(f.cost)),
      h('td', { class: 'num usage-fuel' }, fmtInt(f.fuel))];
    const head = (first, ...more) => h('thead', null, h('tr', null, h('th', null, first), more.map((m) => h('th', null, m)),
      ['Steps', 'Prompt', 'Completion', 'Tokens', 'Cost', 'Plugin fuel'].map((m) => h('th', { class: 'num' }, m))));
    let busy = false;
    const load = async () => {
      if (busy) return;
      busy = true;
      try {
        const u = await api('GET', '/v1/usage?days=' + days.value);
        const budget = u.budget.usd_per_day;
        const cards = h('div', { class: 'cards' },
          h('div', { class: 'card', id: 'budget' }, h('div', { class: 'muted' }, 'Today against the budget'),
            h('div', { class: 'big' }, fmtCost(u.budget.spent_today), budget ? h('span', { class: 'muted' }, ' of ' + fmtCost(budget)) : null),
            budget ? h('progress', { max: budget, value: Math.min(u.budget.spent_today, budget) }) : h('div', { class: 'muted' }, 'no daily budget set')),
          h('div', { class: 'card' }, h('div', { class: 'muted' }, 'Cost, period'), h('div', { class: 'big' }, fmtCost(u.total.cost))),
          h('div', { class: 'card' }, h('div', { class: 'muted' }, 'Tokens, period'), h('div', { class: 'big' }, fmtInt(u.total.usage.total_tokens))),
          h('div', { class: 'card' }, h('div', { class: 'muted' }, 'Model steps, period'), h('div', { class: 'big' }, fmtInt(u.total.steps))),
          h('div', { class: 'card', id: 'usage-fuel-total' }, h('div', { class: 'muted' }, 'Plugin fuel (CPU), period'), h('div', { class: 'big' }, fmtInt(u.total.fuel))));
        const chart = h('div', { id: 'usage-chart', class: 'chart' },
          h('div', { class: 'muted' }, 'Cost per day (USD)' + (budget ? ', against the daily budget' : '')),
          barChart(u.days, (d) => d.cost, 'Cost per day (USD)', budget),
          h('div', { class: 'muted' }, 'Tokens per day'),
          barChart(u.days, (d) => d.usage.total_tokens, 'Tokens per day'),
          h('div', { class: 'muted' }, 'Plugin fuel per day'),
          barChart(u.days, (d) => d.fuel, 'Plugin fuel per day'));
        const dayRows = u.days.slice().reverse().filter((d) => d.steps || d.cost || d.usage.total_tokens || d.fuel);
        body.replaceChildren(cards, chart,
          h('h3', null, 'Per day'),
          h('table', { id: 'usage-days' }, head('Day'), h('tbody', null, dayRows.map((d) => h('tr', { 'data-day': d.day }, h('td', null, d.day), figures(d))))),
          h('h3', null, 'Per agent'),
          h('table', { id: 'usage-agents' }, head('Agent', 'Sessions'), h('tbody', null, u.agents.map((a) => h('tr', { 'data-agent': a.agent }, h('td', null, a.agent), h('td', null, fmtInt(a.sessions)), figures(a))))),
          h('h3', null, 'Per model'),
          h('table', { id: 'usage-models' }, head('Model'), h('tbody', null, (u.models || []).map((m) => h('tr', { 'data-model': m.model }, h('td', null, m.model), figures(m))))),
          h('h3', null, 'Per session'),
          h('table', { id: 'usage-sessions' }, head('Session', 'Last activity'), h('tbody', null, u.sessions.map((x) => h('tr', { 'data-session': x.session_id },
            h('td', null, h('a', { href: '#/sessions/' + encodeURIComponent(x.session_id) }, x.session_id)), h('td', null, fmtTime(x.last_activity)), figures(x))))));
      } catch (e) {
        body.replaceChildren(errorBox(e));
      } finally { busy = false; }
    };
    days.addEventListener('change', load);
    return { unmount: every(load, 15000) };
  }

  // ---- plugins ----

  // heldCard shows a version held because it widens the one serving: what
  // it widens (old → new), and buttons to load or discard it.
  function heldCard(v, after) {
    const err = h('span', { class: 'error', role: 'alert' });
    const decide = (yes) => async () => {
      try {
        await api('POST', '/v1/plugins/' + encodeURIComponent(v.name) + '/versions/' + encodeURIComponent(v.hash), { approve: yes });
        after();
      } catch (e) { err.textContent = e.message; }
    };
    const approve = h('button', { class: 'approve-version', type: 'button' }, 'Approve and load');
    const discard = h('button', { class: 'discard-version danger', type: 'button' }, 'Discard');
    approve.addEventListener('click', decide(true));
    discard.addEventListener('click', decide(false));
    return h('div', { class: 'plugin plugin-held', 'data-plugin': v.name, 'data-hash': v.hash },
      h('div', null, h('strong', null, v.name), ' ', h('code', { title: v.hash }, shortHash(v.hash)), ' ',
        h('span', { class: 'tag external' }, 'held'), h('span', { class: 'muted' }, ' widens ' + shortHash(v.previous) + ', since ' + fmtTime(v.since))),
      h('ul', { class: 'widenings' }, (v.widenings || []).map((w) => h('li', { class: 'widening' },
        h('code', null, `${w.kind} ${w.name}`), ': ' + w.change,
        w.old || w.new ? h('div', { class: 'diff mono' }, h('del', null, w.old || ''), ' → ', h('ins', null, w.new || '')) : null))),
      h('div', { class: 'row' }, approve, discard, err));
  }

  // pluginActions are a module's quarantine (with a button to release
  // it), its canary (to promote it or roll it back) and the versions it
  // replaced (each with a button to roll back to it).
  function pluginActions(m, after) {
    const err = h('span', { class: 'error', role: 'alert' });
    const act = (label, cls, method, path, body) => {
      const b = h('button', { class: cls, type: 'button' }, label);
      b.addEventListener('click', async () => {
        b.disabled = true;
        try {
          await api(method, '/v1/plugins/' + encodeURIComponent(m.name) + path, body);
          after();
        } catch (e) { err.textContent = e.message; b.disabled = false; }
      });
      return b;
    };
    const q = m.quarantine;
    const c = m.canary;
    const versions = m.versions || [];
    return [
      q ? h('div', { class: 'plugin-quarantine row' }, h('span', { class: 'tag external' }, 'quarantined'),
        h('span', { class: 'muted' }, ` since ${fmtTime(q.since)}: failed ${q.failures} times; the last: ${q.last}`),
        act('Release', 'release-plugin', 'POST', '/release')) : null,
      c ? h('div', { class: 'plugin-canary row', 'data-hash': c.hash }, h('span', { class: 'tag' }, 'canary'), ' ',
        h('code', { title: c.hash }, shortHash(c.hash)),
        h('span', { class: 'muted canary-counts' }, ` serves ${Math.round(c.share * 1000) / 10}% of the sessions: ${fmtInt(c.calls)} calls, ${fmtInt(c.failures)} failed`),
        act('Promote', 'promote-canary', 'POST', '/canary/promote'), act('Roll back', 'rollback-canary danger', 'DELETE', '/canary')) : null,
      versions.length ? h('details', { class: 'plugin-versions' }, h('summary', null, `${versions.length} earlier version${versions.length > 1 ? 's' : ''}`),
        versions.map((v) => h('div', { class: 'plugin-version row', 'data-hash': v.hash }, h('code', { title: v.hash }, shortHash(v.hash)),
          h('span', { class: 'muted' }, ' replaced ' + fmtTime(v.replaced)), act('Roll back to it', 'rollback-version', 'POST', '/rollback', { hash: v.hash })))) : null,
      err,
    ];
  }

  // auditTable is the tenant's audit log of its plugins, newest first.
  function auditTable(entries) {
    return h('table', { id: 'plugin-audit' }, h('thead', null, h('tr', null, ['When', 'Plugin', 'What', 'Version', 'By', 'Detail'].map((x) => h('th', null, x)))),
      h('tbody', null, entries.slice().reverse().map((e) => h('tr', { class: 'audit-entry', 'data-action': e.action },
        h('td', null, fmtTime(e.time)), h('td', null, h('code', null, e.plugin)), h('td', null, e.action.replace(/_/g, ' ')),
        h('td', { class: 'mono', title: e.hash || '' }, shortHash(e.hash)), h('td', null, e.by), h('td', { class: 'muted' }, e.detail || '')))));
  }

  // mcpServers shows the tenant's MCP servers: whether each is
  // connected, the tools it serves, and the tool definitions it holds
  // (old → new) with a button to trust each.
  function mcpServers(list, after) {
    if (!list.servers.length) return h('p', { class: 'muted' }, 'No MCP servers (a tenant\'s mcp_servers in the configuration).');
    return list.servers.map((srv) => h('div', { class: 'plugin mcp-server', 'data-server': srv.server },
      h('div', null, h('strong', null, srv.server), ' ', h('code', null, srv.url), ' ',
        h('span', { class: 'tag ' + (srv.connected ? '' : 'external') }, srv.connected ? 'connected' : 'unreachable'),
        srv.last_error ? h('span', { class: 'muted' }, ' ' + srv.last_error) : null),
      h('div', { class: 'mcp-tools' }, srv.tools.map((t) => h('code', { class: 'mcp-tool', 'data-tool': t }, t)).flatMap((x) => [x, ' '])),
      srv.held.map((ht) => {
        const err = h('span', { class: 'error', role: 'alert' });
        const approve = h('button', { class: 'approve-mcp-tool', type: 'button' }, 'Trust and serve');
        approve.addEventListener('click', async () => {
          approve.disabled = true;
          try {
            await api('POST', `/v1/mcp/${encodeURIComponent(srv.server)}/tools/${encodeURIComponent(ht.name)}/approve`, { digest: ht.digest });
            after();
          } catch (e) { err.textContent = e.message; approve.disabled = false; }
        });
        return h('div', { class: 'mcp-held', 'data-tool': ht.name },
          h('div', null, h('span', { class: 'tag external' }, 'held'), ' ', h('code', null, ht.name),
            h('span', { class: 'muted' }, (ht.old ? ' changed' : ' new') + ', since ' + fmtTime(ht.since))),
          h('div', { class: 'diff mono' }, h('del', null, ht.old ? ht.old.description || '' : ''), ' → ', h('ins', null, ht.new.description || '')),
          h('div', { class: 'row' }, approve, err));
      })));
  }

  function pluginsView(root) {
    const name = h('input', { id: 'plugin-name', placeholder: 'module name', required: true, pattern: '[A-Za-z0-9_][A-Za-z0-9._\\-]{0,63}', 'aria-label': 'Module name' });
    const file = h('input', { id: 'plugin-file', type: 'file', accept: '.wasm,application/wasm', required: true, 'aria-label': 'Module file' });
    const result = h('span', { id: 'plugin-upload-result', role: 'status' });
    const form = h('form', { id: 'plugin-upload', class: 'upload' }, h('strong', null, 'Upload a module'), name, file,
      h('button', { id: 'plugin-upload-submit', type: 'submit' }, 'Upload and load'), result);
    file.addEventListener('change', () => {
      if (!name.value && file.files[0]) name.value = file.files[0].name.replace(/\.wasm$/, '');
    });
    const list = h('div', { id: 'plugins' });
    const calls = h('div');
    const audit = h('div');
    const mcp = h('div', { id: 'mcp-servers' });
    append(root, [h('h2', null, 'Plugins'), form, list, h('h3', null, 'MCP servers'), mcp, h('h3', null, 'Which code ran the calls'), calls, h('h3', null, 'Audit log'), audit]);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      if (!file.files[0]) return;
      result.className = 'muted';
      result.textContent = 'loading…';
      try {
        const info = await api('PUT', '/v1/plugins/' + encodeURIComponent(name.value.trim()), file.files[0]);
        result.className = '';
        result.textContent = info.held
          ? `held ${info.held.name} ${shortHash(info.held.hash)}: it widens what the plugin offers; decide below`
          : `loaded ${info.name} ${shortHash(info.hash)}`;
        form.reset();
        load();
      } catch (err) {
        result.className = 'error';
        result.textContent = err.message;
      }
    });
    let busy = false;
    const load = async () => {
      if (busy) return;
      busy = true;
      try {
        const [p, u, a, ms] = await Promise.all([api('GET', '/v1/plugins'), api('GET', '/v1/usage?days=30'), api('GET', '/v1/audit?limit=50'), api('GET', '/v1/mcp')]);
        mcp.replaceChildren(...[].concat(mcpServers(ms, load)));
        const nodes = p.plugins.map((m) => h('div', { class: 'plugin', 'data-plugin': m.name },
          h('div', null, h('strong', null, m.name), ' ', h('code', { class: 'plugin-hash', title: m.hash }, m.hash), ' ',
            h('span', { class: 'tag' }, m.abi)),
          (m.conflicting || []).map((c) => h('p', { class: 'refusal' }, 'conflict: ' + c)),
          (m.tools || []).map((t) => h('div', { class: 'plugin-tool', 'data-tool': t.name },
            h('code', null, t.name), ' ', h('span', { class: 'tag ' + (t.effect || 'read') }, t.effect || 'read'),
            t.idempotent ? h('span', { class: 'tag' }, 'idempotent') : null, ' ', h('span', { class: 'muted' }, t.description || ''))),
          (m.validators || []).map((v) => h('div', { class: 'plugin-validator' }, 'validator ', h('code', null, v.name))),
          (m.policies || []).map((v) => h('div', { class: 'plugin-policy' }, 'approval policy ', h('code', null, v.name))),
          pluginActions(m, load)));
        if (!nodes.length) nodes.push(h('p', { class: 'muted' }, 'No modules loaded.'));
        for (const v of p.held || []) nodes.push(heldCard(v, load));
        for (const r of p.refusals) nodes.push(h('div', { class: 'plugin refusal', 'data-refused': r.name }, h('strong', null, r.name), ' refused: ', r.reason, r.hash ? ' (' + shortHash(r.hash) + ')' : ''));
        for (const c of p.conflicts) if (!p.plugins.some((m) => (m.conflicting || []).includes(c))) nodes.push(h('p', { class: 'refusal' }, 'conflict: ' + c));
        list.replaceChildren(...nodes);
        audit.replaceChildren(a.entries.length ? auditTable(a.entries) : h('p', { class: 'muted' }, 'Nothing happened to the plugins yet.'));
        calls.replaceChildren(
          h('table', { id: 'plugin-tools' }, h('thead', null, h('tr', null, ['Tool', 'Code', 'Calls', 'Errors', 'Time', 'Fuel', 'Policy fuel', 'Last'].map((x) => h('th', null, x)))),
            h('tbody', null, u.tools.map((t) => h('tr', { class: 'tool-usage' }, h('td', null, h('code', null, t.name)), h('td', { class: 'mono call-hash', title: t.source || '' }, shortHash(t.source)),
              h('td', { class: 'num' }, fmtInt(t.calls)), h('td', { class: 'num' }, fmtInt(t.errors)), h('td', { class: 'num' }, t.duration_ms + ' ms'), h('td', { class: 'num tool-fuel' }, fmtInt(t.fuel)), h('td', { class: 'num policy-fuel' }, fmtInt(t.policy_fuel || 0)), h('td', null, fmtTime(t.last)))))),
          h('h3', null, 'Latest calls'),
          h('table', { id: 'plugin-calls' }, h('thead', null, h('tr', null, ['When', 'Session', 'Tool', 'Code', 'Outcome', 'Time', 'Fuel'].map((x) => h('th', null, x)))),
            h('tbody', null, u.calls.map((c) => h('tr', { class: 'plugin-call', 'data-call-id': c.call_id },
              h('td', null, fmtTime(c.time)), h('td', null, h('a', { href: '#/sessions/' + encodeURIComponent(c.session_id) }, c.session_id)),
              h('td', null, h('code', null, c.name)), h('td', { class: 'mono call-hash', title: c.source || '' }, shortHash(c.source)),
              h('td', { class: c.is_error ? 'error' : '' }, c.is_error ? 'error' : 'ok'), h('td', { class: 'num' }, (c.duration_ms || 0) + ' ms'),
              h('td', { class: 'num call-fuel' }, fmtInt(c.fuel)))))));
      } catch (e) {
        list.replaceChildren(errorBox(e));
      } finally { busy = false; }
    };
    return { unmount: every(load, 10000) };
  }

  // webhooksView shows the tenant's webhook endpoints and deliveries: each
  // with its state, attempts and last failure, newest first.
  function webhooksView(root) {
    const endpoints = h('div', { id: 'webhook-endpoints' });
    const deliveries = h('div', { id: 'webhook-deliveries' });
    append(root, [h('h2', null, 'Webhooks'), endpoints, h('h3', null, 'Deliveries'), deliveries]);
    let busy = false;
    const load = async () => {
      if (busy) return;
      busy = true;
      try {
        const [w, d] = await Promise.all([api('GET', '/v1/webhooks'), api('GET', '/v1/webhooks/deliveries?limit=200')]);
        endpoints.replaceChildren(w.endpoints.length
          ? h('ul', null, w.endpoints.map((e) => h('li', { class: 'webhook-endpoint' }, h('code', null, e.url), ' ', h('span', { class: 'muted' }, e.events.join(', ')))))
          : h('p', { class: 'muted' }, 'The tenant has no webhooks (webhooks: in its configuration).'));
        deliveries.replaceChildren(d.deliveries.length
          ? h('table', { id: 'webhook-delivery-table' }, h('thead', null, h('tr', null, ['When', 'Event', 'Session', 'State', 'Attempts', 'Last answer', 'Next attempt'].map((x) => h('th', null, x)))),
            h('tbody', null, d.deliveries.map((x) => {
              const t = x.targets[0] || {};
              const attempts = x.targets.reduce((n, y) => n + y.attempts, 0);
              return h('tr', { class: 'webhook-delivery', 'data-id': x.id, 'data-state': x.state },
                h('td', null, fmtTime(x.staged_at)), h('td', null, h('code', null, x.type)),
                h('td', null, h('a', { href: '#/sessions/' + encodeURIComponent(x.session_id) }, x.session_id)),
                h('td', { class: x.state === 'failed' ? 'error' : '' }, x.state), h('td', { class: 'num' }, fmtInt(attempts)),
                h('td', { class: t.last_error ? 'error' : 'muted' }, t.last_error || (t.last_status ? String(t.last_status) : '')),
                h('td', null, t.next_at ? fmtTime(t.next_at) : ''));
            })))
          : h('p', { class: 'muted' }, 'Nothing delivered yet.'));
      } catch (e) {
        deliveries.replaceChildren(errorBox(e));
      } finally { busy = false; }
    };
    return { unmount: every(load, 5000) };
  }

  // ---- boot ----

  document.addEventListener('DOMContentLoaded', () => {
    document.getElementById('signin').addEventListener('submit', (e) => {
      e.preventDefault();
      const key = document.getElementById('api-key').value.trim();
      if (key) signIn(key);
    });
    document.getElementById('signout').addEventListener('click', () => signOut());
    window.addEventListener('hashchange', route);
    if (apiKey) start(); else showSignin();
  });
})();
