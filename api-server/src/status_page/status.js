// The status page's script (api-server/src/status_page.rs). Every few seconds it reads the
// page's JSON (/status.json) and renders the sections from it, as the server renders them
// (status_page/html.rs: the same ids, data-* attributes and formats), so the page reads the
// same with this script off, only frozen. Values are set as text, never as markup.
//
// With authentication on, a browser sends no token by itself: the script asks for one, keeps
// it in this tab's sessionStorage (gone when the tab closes) and sends it only in the
// Authorization header of its own requests; never in a URL.
'use strict';

(() => {
  const body = document.body;
  const REFRESH_MS = Number(body.dataset.refreshS || '5') * 1000;
  const JSON_URL = body.dataset.json || '/status.json';
  const AUTH_REQUIRED = body.dataset.auth === 'required';
  const TOKEN_KEY = 'crucible.status.token';
  const byId = (id) => document.getElementById(id);

  // The activity table's rows, as html.rs ACTIVITY_ROWS; error codes follow.
  const ACTIVITY_ROWS = [
    ['finished', 'Finished'],
    ['per_minute', 'Per minute'],
    ['done', 'Done (a verdict)'],
    ['ok', '· ok'],
    ['incorrect', '· incorrect'],
    ['decoy', '· decoy'],
    ['hack', '· hack'],
    ['error', '· error'],
    ['failed', 'Failed (no verdict)'],
    ['cancelled', 'Cancelled'],
  ];

  // "2024-04-05T12:34:56.789Z" -> "2024-04-05 12:34:56 UTC" (html.rs `time`).
  const time = (iso) => iso.slice(0, 19).replace('T', ' ') + ' UTC';

  // How long before `now` `then` was (html.rs `age`).
  const age = (now, then) => {
    const s = Math.max(0, Math.floor((Date.parse(now) - Date.parse(then)) / 1000));
    if (s < 120) return `${s} s ago`;
    if (s < 7200) return `${Math.floor(s / 60)} min ago`;
    return `${Math.floor(s / 3600)} h ago`;
  };

  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };

  // A row of <td>s: cells are [attributes, text].
  const row = (attrs, cells) => {
    const tr = el('tr', attrs);
    for (const [a, text] of cells) tr.append(el('td', a, text));
    return tr;
  };

  const emptyRow = (columns, why) => {
    const tr = el('tr', { class: 'empty' });
    tr.append(el('td', { colspan: String(columns) }, why));
    return tr;
  };

  const fill = (id, rows) => byId(id).replaceChildren(...rows);
  const num = { class: 'num' };
  const orDash = (v) => (v === undefined || v === null ? '–' : String(v));

  const notice = (text) => {
    const p = byId('notice');
    p.textContent = text;
    p.hidden = !text;
  };

  const device = (w) => {
    const kind = w.device.kind === 'cuda' ? 'GPU' : 'CPU';
    const index = w.device_index === null || w.device_index === undefined ? '' : ` ${w.device_index}`;
    return `${kind}${index} · ${w.device.name}`;
  };

  const renderWorkers = (page) => {
    const alive = page.workers.filter((w) => w.state !== 'lost').length;
    byId('workers-summary').textContent = `${page.workers.length} registered, ${alive} alive`;
    if (page.workers.length === 0) return fill('worker-rows', [emptyRow(7, 'No worker is registered.')]);
    fill('worker-rows', page.workers.map((w) => row(
      { 'data-worker-id': w.worker_id, 'data-node': w.node, 'data-state': w.state },
      [
        [{}, w.node],
        [{}, device(w)],
        [{ class: `state-${w.state}` }, w.state],
        [{ class: `health-${w.health}` }, w.health],
        [{ class: 'mono' }, orDash(w.current_task)],
        [num, String(w.tasks_done)],
        [{}, age(page.generated_at, w.last_heartbeat)],
      ],
    )));
  };

  const renderQueue = (page) => {
    const q = page.queue;
    const cells = [['queued-high', q.queued_high], ['queued-normal', q.queued_normal],
      ['queued-low', q.queued_low], ['running', q.running], ['queue-cap', q.queue_cap]];
    fill('priority-rows', [row({}, cells.map(([k, n]) => [{ 'data-cell': k, class: 'num' }, String(n)]))]);
    const tenants = q.tenants || [];
    if (tenants.length === 0) return fill('tenant-rows', [emptyRow(3, 'No tenant has open tasks.')]);
    fill('tenant-rows', tenants.map((t) => row({ 'data-tenant': t.tenant },
      [[{}, t.tenant], [num, String(t.queued)], [num, String(t.running)]])));
  };

  const activityValue = (w, key) => {
    const v = w.verdicts;
    const values = {
      finished: w.finished, per_minute: w.per_minute.toFixed(1), done: w.done, ok: v.ok,
      incorrect: v.incorrect, decoy: v.decoy, hack: v.hack, error: v.error, failed: w.failed,
      cancelled: w.cancelled,
    };
    if (key in values) return String(values[key]);
    return String(w.error_codes[key.slice('code-'.length)] || 0);
  };

  const renderActivity = (page) => {
    const windows = page.activity.windows;
    const head = [el('th')];
    for (const w of windows) head.push(el('th', { 'data-window': String(w.minutes) }, `Last ${w.minutes} min`));
    byId('activity-head').replaceChildren(...head);
    const codes = [...new Set(windows.flatMap((w) => Object.keys(w.error_codes)))].sort();
    const rows = ACTIVITY_ROWS.concat(codes.map((c) => [`code-${c}`, `· · ${c}`]));
    fill('activity-rows', rows.map(([key, label]) => {
      const tr = el('tr', { 'data-row': key });
      tr.append(el('th', { scope: 'row' }, label));
      for (const w of windows) {
        tr.append(el('td', { 'data-cell': `w${w.minutes}-${key}`, class: 'num' }, activityValue(w, key)));
      }
      return tr;
    }));
  };

  const renderCaches = (page) => {
    fill('cache-rows', page.caches.map((c) => row({ 'data-cache': c.cache }, [
      [{}, c.cache],
      [num, String(c.hits)],
      [num, String(c.misses)],
      [{ class: 'num', 'data-cell': 'hit-rate' },
        c.hit_rate === undefined ? '–' : `${(c.hit_rate * 100).toFixed(1)} %`],
    ])));
  };

  const renderFailures = (page) => {
    const list = page.activity.recent_failures;
    if (list.length === 0) return fill('failure-rows', [emptyRow(7, 'No failure in the last tasks.')]);
    fill('failure-rows', list.map((f) => row({ 'data-task-id': f.task_id }, [
      [{}, time(f.finished_at)],
      [{ class: 'mono' }, f.task_id],
      [{}, f.status],
      [{}, orDash(f.verdict)],
      [{}, orDash(f.error_code)],
      [{ class: 'message' }, orDash(f.message)],
      [{}, orDash(f.tenant)],
    ])));
  };

  const render = (page) => {
    const stamp = byId('generated-at');
    stamp.dataset.source = 'live';
    stamp.textContent = `Live: updated ${time(page.generated_at)}, every ${REFRESH_MS / 1000} s`;
    byId('broker').textContent = `broker: ${page.broker}`;
    byId('version').textContent = `version ${page.version}`;
    renderWorkers(page);
    renderQueue(page);
    renderActivity(page);
    renderCaches(page);
    renderFailures(page);
    document.documentElement.dataset.live = '1';
  };

  // Signed out: every section says so, as the server renders it without a token.
  const renderSignedOut = (why) => {
    const stamp = byId('generated-at');
    stamp.dataset.source = 'none';
    stamp.textContent = 'No data';
    byId('workers-summary').textContent = '';
    for (const [id, columns] of [['worker-rows', 7], ['priority-rows', 5], ['tenant-rows', 3],
      ['activity-rows', 3], ['cache-rows', 4], ['failure-rows', 7]]) {
      fill(id, [emptyRow(columns, why)]);
    }
    byId('activity-head').replaceChildren(el('th'));
    notice(why);
  };

  const showSignIn = (signedIn) => {
    byId('token-form').hidden = signedIn || !AUTH_REQUIRED;
    byId('forget-token').hidden = !signedIn;
  };

  const refresh = async () => {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (AUTH_REQUIRED && !token) {
      showSignIn(false);
      return;
    }
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    let response;
    try {
      response = await fetch(JSON_URL, { headers, cache: 'no-store', credentials: 'omit' });
    } catch (e) {
      notice(`Refresh failed (${e.message}); the figures below are from the last one.`);
      return;
    }
    if (response.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      showSignIn(false);
      renderSignedOut('That token was refused: enter the admin token (or a tenant\'s).');
      return;
    }
    if (!response.ok) {
      let message = response.statusText;
      try { message = (await response.json()).message || message; } catch (_) { /* not JSON */ }
      notice(`Refresh failed (${response.status}: ${message}); the figures below are from the last one.`);
      return;
    }
    render(await response.json());
    notice('');
    showSignIn(Boolean(token));
  };

  const loop = async () => {
    await refresh();
    setTimeout(loop, REFRESH_MS);
  };

  byId('token-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const input = byId('token');
    const token = input.value.trim();
    input.value = '';
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    refresh();
  });
  byId('forget-token').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showSignIn(false);
    renderSignedOut('Token forgotten: enter one to see the service\'s status.');
  });

  loop();
})();
