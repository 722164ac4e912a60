// jobhost dashboard: polls the REST API (/api/jobs...) and renders the jobs, the selected
// job's checkpoint history with the restore command to copy, a chart of checkpoint size
// and duration, and the incremental dependency chain. No libraries; every text goes in
// through textContent (never innerHTML).
'use strict';

(function () {
  const POLL_RUNNING_MS = 1500;  // while a job runs
  const POLL_IDLE_MS = 5000;     // to notice new jobs
  const CHART_POINTS = 60;
  const HISTORY_ROWS = 12;      // rows shown until "show all"

  const state = {
    jobs: [],
    readOnly: true,
    selected: null,        // job id
    history: null,         // checkpoint list of the selected job
    historyKey: '',
    detail: null,
    detailFor: '',
    selectedCheckpoint: null,  // checkpoint id for the chain view
    historyFetchedFor: '',
    showAll: false,
    stateView: null,       // {key: '<job>/<chk>', view, entries} of the state section
  };

  const $ = (id) => document.getElementById(id);

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  const SVGNS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function bytes(n) {
    if (!n) return '0 B';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + ' ' + units[i];
  }
  function millis(ms) {
    if (ms < 1) return ms.toFixed(2) + ' ms';
    if (ms < 1000) return ms.toFixed(0) + ' ms';
    return (ms / 1000).toFixed(2) + ' s';
  }
  function count(n) { return Math.round(n).toLocaleString('en-US'); }
  function rate(r) { return r === undefined ? '' : (r >= 100 ? r.toFixed(0) : r.toFixed(1)) + '/s'; }
  function when(t) {
    if (!t) return '–';
    const d = new Date(t);
    const today = new Date();
    const time = d.toLocaleTimeString('en-GB');
    return d.toDateString() === today.toDateString() ? time : d.toISOString().slice(0, 10) + ' ' + time;
  }
  function badge(status) { return el('span', { class: 'badge ' + status, text: status }); }

  // Every request carries the dashboard's cookie (HttpOnly: the script never sees the
  // token; the browser sends it to this origin only). Without it the API answers 401.
  async function getJson(url, options) {
    const r = await fetch(url, Object.assign({ cache: 'no-store', credentials: 'same-origin' }, options || {}));
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (r.status === 401) $('login').hidden = false;
    if (!r.ok) throw new Error((body && body.error) || (r.status + ' ' + r.statusText));
    $('login').hidden = true;
    return body;
  }

  function post(url, payload) {
    return getJson(url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(payload || {}),
    });
  }

  // ---------------------------------------------------------------------------------
  // Jobs

  function renderJobs(list) {
    const body = $('jobs').tBodies[0];
    body.replaceChildren();
    for (const j of list.jobs) {
      // The rates come from the job itself (its supervisor, over the last 5 s): the same
      // numbers as its /metrics.
      const r = j.running ? { in: j.recordsInPerSecond, out: j.recordsOutPerSecond } : undefined;
      const row = el('tr', { class: 'job-row' + (j.id === state.selected ? ' selected' : ''), 'data-job-id': j.id },
        el('td', {}, el('code', { title: j.id, text: j.id.slice(0, 12) })),
        el('td', {}, badge(j.status)),
        el('td', { class: 'job-class', text: j.jobClass }),
        el('td', { text: j.backend + (j.parallelism > 1 ? ', p=' + j.parallelism : '') }),
        el('td', { text: when(j.startTimeMs) }),
        el('td', { class: 'num' }, count(j.recordsIn), r ? el('span', { class: 'rate', text: rate(r.in) }) : null),
        el('td', { class: 'num' }, count(j.recordsOut), r ? el('span', { class: 'rate', text: rate(r.out) }) : null),
        el('td', { class: 'num', text: j.restarts }),
        el('td', { class: j.lastFailure ? 'failure' : '', title: j.lastFailure || null },
          j.lastFailure ? (j.lastFailureTimeMs ? when(j.lastFailureTimeMs) + ': ' : '') + j.lastFailure : '–'),
        el('td', { class: 'num', text: j.lastCheckpointId ? 'chk-' + j.lastCheckpointId : '–' }));
      row.addEventListener('click', () => select(j.id));
      body.append(row);
    }
    $('no-jobs').hidden = list.jobs.length > 0;
    $('ckdir').textContent = list.checkpointDir;
    const running = list.jobs.filter((j) => j.running).length;
    $('summary').textContent = running + ' running, ' + (list.jobs.length - running) + ' ended';
    $('mode').textContent = list.readOnly ? 'read-only' : '';
    const problems = $('problems');
    problems.replaceChildren(...(list.problems || []).map((p) => el('li', { text: p })));
  }

  function chooseSelection() {
    const fromHash = decodeURIComponent((location.hash.match(/job=([0-9a-f]{1,32})/) || [])[1] || '');
    const ids = state.jobs.map((j) => j.id);
    if (fromHash && ids.includes(fromHash)) state.selected = fromHash;
    if (!state.selected || !ids.includes(state.selected)) {
      const first = state.jobs.find((j) => j.running) || state.jobs[0];
      state.selected = first ? first.id : null;
    }
  }

  function select(id) {
    if (state.selected !== id) {
      state.selected = id;
      state.selectedCheckpoint = null;
      state.history = null;
      state.historyKey = '';
      state.showAll = false;
    }
    history.replaceState(null, '', '#job=' + id);
    for (const row of $('jobs').tBodies[0].rows) row.classList.toggle('selected', row.dataset.jobId === id);
    refreshSelected(true).catch(showError);
  }

  // ---------------------------------------------------------------------------------
  // The selected job

  async function refreshSelected(force) {
    const job = state.jobs.find((j) => j.id === state.selected);
    $('job').hidden = !job;
    if (!job) return;
    const key = job.id + '|' + job.status + '|' + job.running;
    if (force || state.detailFor !== key) {
      state.detail = await getJson('/api/jobs/' + job.id);
      state.detailFor = key;
    }
    // Running jobs change all the time; an ended job's history is read once.
    if (force || job.running || state.historyFetchedFor !== key) {
      const history = await getJson('/api/jobs/' + job.id + '/checkpoints');
      state.historyFetchedFor = key;
      const hk = JSON.stringify(history);
      if (hk !== state.historyKey) {
        state.history = history;
        state.historyKey = hk;
        renderHistory(job);
      }
    }
    renderJob(job);
  }

  function renderJob(job) {
    $('job-title').replaceChildren(el('span', { text: job.jobClass + ' ' }), badge(job.status),
      el('span', { class: 'tag mono', text: job.id }));
    const facts = [
      ['Job ID', job.id],
      ['Plugin', job.pluginPath + (job.source === 'disk' && job.pluginPath.indexOf('/') < 0 ? ' (file name from the checkpoint metadata)' : '')],
      ['Backend', job.backend + ', parallelism ' + job.parallelism],
      ['Started', when(job.startTimeMs)],
      ['Checkpoint directory', job.checkpointDir || '(checkpointing off)'],
      ['Checkpoints', job.running ? count(job.checkpointsCompleted) + ' completed, ' + count(job.checkpointsFailed) + ' failed'
        : 'the job is not running; the table shows what is on disk'],
      ['Restarts', String(job.restarts)],
      ['Last failure', job.lastFailure ? when(job.lastFailureTimeMs) + ': ' + job.lastFailure : '–'],
    ];
    if (job.running && job.lastCheckpointCompletedMs)
      facts.push(['Last checkpoint', when(job.lastCheckpointCompletedMs) + ', ' + millis(job.lastCheckpointDurationMs) + ', ' +
        bytes(job.lastCheckpointSizeBytes) + ' written (' + bytes(job.lastCheckpointFullSizeBytes) + ' in all)' +
        (job.checkpointsInProgress ? '; ' + job.checkpointsInProgress + ' in progress' : '')]);
    if (job.running && job.lastRestoreMs) facts.push(['Last restore', when(job.lastRestoreMs)]);
    if (job.storeUnavailableSinceMs)
      facts.push(['Checkpoint store', 'unavailable since ' + when(job.storeUnavailableSinceMs) + ': checkpoints are declined']);
    if (job.running) facts.push(['Process', String(job.pid)]);
    $('job-facts').replaceChildren(...facts.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: v })]));
    renderTasks(job);
    $('actions').hidden = state.readOnly || !job.running || job.status !== 'RUNNING';
    const config = (state.detail && state.detail.configuration) || [];
    $('config-table').tBodies[0].replaceChildren(
      ...config.map((c) => el('tr', {}, el('td', { text: c.key }), el('td', { text: c.value }))));
    $('config').hidden = config.length === 0;
  }

  // One row per task (a subtask of a chain of operators): Flink's task metrics.
  function renderTasks(job) {
    const tasks = job.tasks || [];
    $('tasks').tBodies[0].replaceChildren(...tasks.map((t) => el('tr', {},
      el('td', { text: t.name }),
      el('td', { class: 'num', text: (t.subtask + 1) + '/' + t.parallelism }),
      el('td', { class: 'num' }, count(t.recordsIn), el('span', { class: 'rate', text: rate(t.recordsInPerSecond) })),
      el('td', { class: 'num' }, count(t.recordsOut), el('span', { class: 'rate', text: rate(t.recordsOutPerSecond) })),
      el('td', { class: 'num', text: Math.round(t.busyTimeMsPerSecond) + ' ms/s' }),
      el('td', { class: 'num', text: Math.round(t.backPressuredTimeMsPerSecond) + ' ms/s' }),
      el('td', { text: t.hasInputWatermark ? new Date(t.inputWatermark).toISOString() : '–' }),
      el('td', { class: 'num', text: t.stateEntries ? count(t.stateEntries) : '–' }))));
    $('tasks-section').hidden = tasks.length === 0;
  }

  function kindText(c) {
    return c.kind + ' (' + c.type + ')';
  }

  function renderHistory(job) {
    const list = (state.history && state.history.checkpoints) || [];
    const body = $('checkpoints').tBodies[0];
    body.replaceChildren();
    const newestFirst = list.slice().reverse();
    const shown = state.showAll ? newestFirst : newestFirst.slice(0, HISTORY_ROWS);
    const more = $('show-all');
    more.hidden = newestFirst.length <= HISTORY_ROWS;
    more.textContent = state.showAll ? 'Show the newest ' + HISTORY_ROWS + ' only' : 'Show all ' + newestFirst.length + ' records';
    more.onclick = () => { state.showAll = !state.showAll; renderHistory(job); };
    for (const c of shown) {
      const status = el('td', {}, badge(c.status));
      if (c.subsumed) status.append(el('span', { class: 'tag', text: 'subsumed', title: 'deleted by retention (state.checkpoints.num-retained)' }));
      if (c.failureReason) status.append(el('div', { class: 'reason', text: c.failureReason }));
      let restore;
      if (c.restorable) {
        const code = el('code', { class: 'restore-command', 'data-restore-command': c.restoreCommand, text: c.restoreCommand });
        const button = el('button', { type: 'button', class: 'copy', 'data-copy': c.restoreCommand, title: 'Copy the restore command' }, 'Copy');
        button.addEventListener('click', (ev) => { ev.stopPropagation(); copy(button, code, c.restoreCommand); });
        restore = el('td', {}, el('div', { class: 'restore' }, code, button));
      } else {
        restore = el('td', { class: 'hint', text: c.status === 'COMPLETED' ? (c.subsumed ? 'deleted by retention' : 'no longer on disk') : '' });
      }
      const deps = c.dependsOn.length ? c.dependsOn.map((d) => 'chk-' + d).join(', ') : (c.status === 'COMPLETED' ? 'self-contained' : '');
      const row = el('tr', { class: 'chk-row' + (c.id === state.selectedCheckpoint ? ' selected' : ''), 'data-checkpoint-id': c.id, title: c.path },
        el('td', { class: 'num', text: c.id }),
        status,
        el('td', { text: kindText(c) }),
        el('td', { text: when(c.triggerTimeMs) }),
        el('td', { class: 'num', text: c.status === 'IN_PROGRESS' ? '…' : millis(c.durationMs) + ' (' + millis(c.syncDurationMs) + ' / ' + millis(c.asyncDurationMs) + ')' }),
        el('td', { class: 'num', 'data-alignment-ms': c.alignmentMs, text: c.status === 'COMPLETED' ? millis(c.alignmentMs) : '' }),
        el('td', { class: 'num', text: c.status === 'COMPLETED' ? bytes(c.newBytes) : '' }),
        el('td', { class: 'num', text: c.status === 'COMPLETED' ? bytes(c.totalBytes) : '' }),
        el('td', { text: deps }),
        restore);
      row.addEventListener('click', () => { state.selectedCheckpoint = c.id; renderHistory(job); });
      body.append(row);
    }
    $('no-checkpoints').hidden = list.length > 0;
    renderChart(list);
    renderChain(list);
    renderStateView(job, list);
  }

  function copy(button, code, text) {
    const done = () => {
      button.textContent = 'Copied';
      button.classList.add('copied');
      setTimeout(() => { button.textContent = 'Copy'; button.classList.remove('copied'); }, 1500);
    };
    const fallback = () => {
      const range = document.createRange();
      range.selectNodeContents(code);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      try { if (document.execCommand('copy')) done(); } catch (e) { /* the text stays selected */ }
    };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done, fallback);
    else fallback();
  }

  // A bar per completed checkpoint: total size (light) with the new bytes (dark); a line
  // for the end-to-end duration on its own scale (right axis).
  function renderChart(list) {
    const points = list.filter((c) => c.status === 'COMPLETED' && c.kind === 'checkpoint').slice(-CHART_POINTS);
    const box = $('chart');
    if (points.length === 0) {
      box.replaceChildren(el('p', { class: 'hint', text: 'No completed checkpoints yet.' }));
      return;
    }
    const W = 900, H = 220, L = 64, R = 64, T = 14, B = 34;
    const pw = W - L - R, ph = H - T - B;
    const maxBytes = Math.max(1, ...points.map((c) => c.totalBytes));
    const maxMs = Math.max(1, ...points.map((c) => c.durationMs));
    const step = pw / points.length;
    const barW = Math.max(2, Math.min(28, step * 0.7));
    const s = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'aria-label': 'checkpoint size and duration' });
    s.append(svg('title', {}, 'Checkpoint size (bars: total, dark: new) and duration (line)'));
    for (let i = 0; i <= 4; i++) {
      const y = T + ph - (ph * i) / 4;
      s.append(svg('line', { class: 'grid', x1: L, x2: L + pw, y1: y, y2: y }));
      s.append(svg('text', { x: L - 6, y: y + 4, 'text-anchor': 'end' }, bytes((maxBytes * i) / 4)));
      s.append(svg('text', { x: L + pw + 6, y: y + 4 }, millis((maxMs * i) / 4)));
    }
    s.append(svg('line', { class: 'axis', x1: L, x2: L, y1: T, y2: T + ph }));
    s.append(svg('line', { class: 'axis', x1: L + pw, x2: L + pw, y1: T, y2: T + ph }));
    s.append(svg('line', { class: 'axis', x1: L, x2: L + pw, y1: T + ph, y2: T + ph }));
    const line = [];
    points.forEach((c, i) => {
      const cx = L + step * i + step / 2;
      const th = (c.totalBytes / maxBytes) * ph;
      const nh = (c.newBytes / maxBytes) * ph;
      const total = svg('rect', { class: 'total', x: cx - barW / 2, y: T + ph - th, width: barW, height: Math.max(0, th) });
      total.append(svg('title', {}, 'chk-' + c.id + ': ' + bytes(c.totalBytes) + ' total, ' + bytes(c.newBytes) + ' new, ' + millis(c.durationMs)));
      s.append(total);
      s.append(svg('rect', { class: 'new', x: cx - barW / 2, y: T + ph - nh, width: barW, height: Math.max(0, nh) }));
      line.push([cx, T + ph - (c.durationMs / maxMs) * ph]);
      const labelEvery = Math.ceil(points.length / 12);
      const last = i === points.length - 1;
      if (last || (i % labelEvery === 0 && points.length - 1 - i >= labelEvery / 2))
        s.append(svg('text', { x: cx, y: T + ph + 14, 'text-anchor': 'middle' }, String(c.id)));
    });
    s.append(svg('polyline', { class: 'duration', points: line.map((p) => p[0].toFixed(1) + ',' + p[1].toFixed(1)).join(' ') }));
    for (const [x, y] of line) s.append(svg('circle', { class: 'duration-dot', cx: x.toFixed(1), cy: y.toFixed(1), r: 2.5 }));
    s.append(svg('text', { x: L, y: H - 4 }, 'checkpoint id'));
    s.append(svg('rect', { class: 'total', x: L + 110, y: H - 13, width: 10, height: 10 }));
    s.append(svg('text', { x: L + 124, y: H - 4 }, 'total size'));
    s.append(svg('rect', { class: 'new', x: L + 200, y: H - 13, width: 10, height: 10 }));
    s.append(svg('text', { x: L + 214, y: H - 4 }, 'new bytes'));
    s.append(svg('line', { class: 'duration', x1: L + 290, x2: L + 304, y1: H - 8, y2: H - 8 }));
    s.append(svg('text', { x: L + 308, y: H - 4 }, 'duration (right axis)'));
    box.replaceChildren(s);
  }

  // Which older checkpoints' files the selected (default: the newest restorable)
  // checkpoint still needs: what a restore from it reads.
  function renderChain(list) {
    const box = $('chain');
    const byId = new Map(list.map((c) => [c.id, c]));
    let c = state.selectedCheckpoint !== null ? byId.get(state.selectedCheckpoint) : null;
    if (!c || c.status !== 'COMPLETED') {
      const done = list.filter((x) => x.status === 'COMPLETED');
      c = done.filter((x) => x.restorable).pop() || done.pop();
    }
    if (!c) {
      box.replaceChildren(el('p', { class: 'hint', text: 'Select a completed checkpoint in the table.' }));
      return;
    }
    const inherited = c.dependencies.reduce((a, d) => a + d.bytes, 0);
    const own = Math.max(0, c.totalBytes - inherited);
    const intro = c.dependencies.length === 0
      ? 'chk-' + c.id + ' is self-contained: restoring it reads only its own ' + bytes(c.totalBytes) + '.'
      : 'Restoring chk-' + c.id + ' reads ' + bytes(c.totalBytes) + ': ' + bytes(inherited) + ' in files of ' +
        c.dependencies.length + ' older checkpoint' + (c.dependencies.length > 1 ? 's' : '') + ', ' + bytes(own) +
        ' of its own. Those shared files stay on disk while it is retained.';
    const nodes = [el('p', { id: 'chain-summary', text: intro })];
    for (const d of c.dependencies) {
      const older = byId.get(d.checkpointId);
      const gone = !older || older.subsumed || !older.restorable;
      nodes.push(el('div', { class: 'chain-node' + (gone ? ' gone' : ''), 'data-checkpoint-id': d.checkpointId,
        title: gone ? 'chk-' + d.checkpointId + ' itself is gone (subsumed), but these shared files are still referenced' : '' },
        el('b', { text: 'chk-' + d.checkpointId }), d.files + ' file' + (d.files === 1 ? '' : 's') + ', ' + bytes(d.bytes)));
      nodes.push(el('span', { class: 'chain-arrow', text: '→' }));
    }
    nodes.push(el('div', { class: 'chain-node own', 'data-checkpoint-id': c.id },
      el('b', { text: 'chk-' + c.id }), bytes(own) + ' own' + (c.incremental ? '' : ' (' + c.type + ')')));
    box.replaceChildren(...nodes);
  }

  // The keyed state of the selected completed checkpoint, read on request (it scans the
  // checkpoint's files): operators and states with their entry counts, then the first
  // entries of a chosen state — as `jobhost state ls` and `dump` show them.
  function renderStateView(job, list) {
    const box = $('state-view');
    const byId = new Map(list.map((c) => [c.id, c]));
    let c = state.selectedCheckpoint !== null ? byId.get(state.selectedCheckpoint) : null;
    if (!c || c.status !== 'COMPLETED' || !c.restorable) c = list.filter((x) => x.restorable && x.kind === 'checkpoint').pop();
    if (!c || c.kind !== 'checkpoint') {
      box.replaceChildren(el('p', { class: 'hint', text: 'Select a completed checkpoint that is still on disk.' }));
      return;
    }
    const key = job.id + '/' + c.id;
    const sv = state.stateView && state.stateView.key === key ? state.stateView : null;
    const nodes = [];
    const load = el('button', { type: 'button', id: 'state-load' }, sv ? 'Read chk-' + c.id + ' again' : 'Show the keyed state of chk-' + c.id);
    load.addEventListener('click', async () => {
      load.disabled = true;
      try {
        const view = await getJson('/api/jobs/' + job.id + '/checkpoints/' + c.id + '/state');
        state.stateView = { key, view, entries: null };
      } catch (e) {
        state.stateView = { key, error: e.message };
      }
      renderStateView(job, list);
    });
    nodes.push(el('p', {}, load));
    if (sv && sv.error) nodes.push(el('p', { class: 'error', text: sv.error }));
    if (sv && sv.view) {
      const table = el('table', { id: 'state-table' },
        el('thead', {}, el('tr', {}, ...['Operator', 'State', 'Kind', 'Key', 'User key', 'Value', 'Entries', 'Bytes'].map(
          (h, i) => el('th', { class: i >= 6 ? 'num' : undefined, text: h })))));
      const body = el('tbody');
      for (const op of sv.view.operators) {
        for (const st of op.states) {
          const chosen = sv.entries && sv.entries.operatorUid === op.uid && sv.entries.state === st.name;
          const row = el('tr', { class: 'state-row' + (chosen ? ' selected' : ''), 'data-operator': op.uid, 'data-state': st.name,
            title: 'Show the first entries' },
            el('td', { text: op.uid }), el('td', { text: st.name }), el('td', { text: st.kind }), el('td', { text: st.keyType }),
            el('td', { text: st.userKeyType }), el('td', { text: st.valueType }),
            el('td', { class: 'num', text: count(st.entries) }), el('td', { class: 'num', text: bytes(st.bytes) }));
          row.addEventListener('click', async () => {
            try {
              sv.entries = await getJson('/api/jobs/' + job.id + '/checkpoints/' + c.id + '/state/' +
                encodeURIComponent(op.uid) + '/' + encodeURIComponent(st.name) + '?limit=50');
            } catch (e) {
              sv.entries = { operatorUid: op.uid, state: st.name, error: e.message };
            }
            renderStateView(job, list);
          });
          body.append(row);
        }
      }
      table.append(body);
      nodes.push(el('p', { class: 'hint', text: sv.view.path + ' (' + sv.view.backend + ')' }), table);
      const en = sv.entries;
      if (en && en.error) nodes.push(el('p', { class: 'error', text: en.error }));
      if (en && en.entries) {
        const map = en.kind === 'MapState';
        const head = map ? ['Key', 'User key', 'Value'] : ['Key', 'Value'];
        const rows = en.entries.map((e) => el('tr', {}, el('td', { text: e.key }), map ? el('td', { text: e.userKey }) : null,
          el('td', { text: e.value })));
        nodes.push(el('h4', { text: en.operatorUid + ' / ' + en.state }),
          el('table', { id: 'state-entries' }, el('thead', {}, el('tr', {}, ...head.map((h) => el('th', { text: h })))),
            el('tbody', {}, ...rows)),
          el('p', { class: 'hint', text: (en.more ? 'The first ' + en.entries.length + ' entries. ' : en.entries.length + ' entries. ') +
            'All of them: jobhost state dump ' + sv.view.path + ' --operator ' + en.operatorUid + ' --state ' + en.state +
            (en.undecoded.length ? ' --plugin <lib.so> -c <Class> (to decode ' + en.undecoded.join(', ') + ')' : '') }));
      }
    }
    box.replaceChildren(...nodes);
  }

  // ---------------------------------------------------------------------------------
  // Actions

  function showError(e) {
    const u = $('updated');
    u.textContent = 'error: ' + e.message;
    u.className = 'error';
  }

  function actionResult(text, isError) {
    const r = $('action-result');
    r.textContent = text;
    r.className = isError ? 'error' : '';
  }

  $('sp-button').addEventListener('click', async () => {
    const id = state.selected;
    const button = $('sp-button');
    button.disabled = true;
    actionResult('taking a savepoint…');
    try {
      const r = await post('/api/jobs/' + id + '/savepoints', { format: $('sp-format').value });
      actionResult('Savepoint completed: ' + r.path + ' — restore with: ' + r.restoreCommand);
      await refreshSelected(true);
    } catch (e) {
      actionResult('Savepoint failed: ' + e.message, true);
    } finally {
      button.disabled = false;
    }
  });

  $('cancel-button').addEventListener('click', async () => {
    const id = state.selected;
    if (!window.confirm('Cancel job ' + id + '? Its checkpoints stay (unless DELETE_ON_CANCELLATION).')) return;
    try {
      await post('/api/jobs/' + id + '/cancel', {});
      actionResult('Cancelling job ' + id);
    } catch (e) {
      actionResult('Cancel failed: ' + e.message, true);
    }
  });

  // ---------------------------------------------------------------------------------
  // Polling

  async function poll() {
    let delay = POLL_IDLE_MS;
    try {
      const list = await getJson('/api/jobs');
      state.jobs = list.jobs;
      state.readOnly = list.readOnly;
      chooseSelection();
      renderJobs(list);
      await refreshSelected(false);
      const u = $('updated');
      u.textContent = 'updated ' + new Date().toLocaleTimeString('en-GB');
      u.className = '';
      if (list.jobs.some((j) => j.running)) delay = POLL_RUNNING_MS;
    } catch (e) {
      showError(e);
      delay = POLL_RUNNING_MS;
    }
    setTimeout(poll, delay);
  }

  window.addEventListener('hashchange', () => {
    const m = location.hash.match(/job=([0-9a-f]{1,32})/);
    if (m && m[1] !== state.selected && state.jobs.some((j) => j.id === m[1])) select(m[1]);
  });
  poll();
})();
