// Rocklet's operator console: plain JS, no build step. Reads the broker's JSON API
// (/api/...), one page at a time, and refreshes the open view by itself.
'use strict';

const $ = (id) => document.getElementById(id);
const esc = (v) => String(v ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
const PAGE = 50;

const state = {
  view: 'overview',
  // Per paged view: the cursors of the pages before this one, and this page's.
  pages: { topics: [], pending: [], delays: [], dlq: [] },
  cursor: { topics: null, pending: null, delays: null, dlq: null },
  next: {},
  topicName: '',
  selected: new Set(),
  lastSearch: null,
  dlqOpen: null,
  timer: null,
  // Cluster mode: this node's broker group (the overview's `cluster`), else null.
  cluster: null,
};

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Rocklet-Console': '1' },
    body: JSON.stringify(body),
  };
  // From the origin, not the page's URL: a page opened as http://user:secret@host/ has
  // credentials in its URL, and fetch refuses a URL that holds them (the browser still sends
  // the credentials it was given, for the origin).
  const r = await fetch(new URL(path, location.origin), opts);
  const text = await r.text();
  let v;
  try { v = JSON.parse(text); } catch { v = { error: text }; }
  if (!r.ok) throw new Error(`${path.split('?')[0]}: ${r.status} ${v.error || ''}`);
  return v;
}

function showError(e) {
  const box = $('error');
  if (!e) { box.hidden = true; return; }
  box.hidden = false;
  box.textContent = String(e.message || e);
}

function ms(v) {
  if (v === null || v === undefined) return '–';
  const a = Math.abs(v);
  const s = a < 1000 ? `${a} ms` : a < 120000 ? `${(a / 1000).toFixed(1)} s` : a < 7200000 ? `${(a / 60000).toFixed(1)} min` : `${(a / 3600000).toFixed(1)} h`;
  return v < 0 ? `${s} ago` : s;
}
const when = (t) => (t ? new Date(t).toISOString().replace('T', ' ').replace('Z', '') : '–');
const qs = (o) => Object.entries(o).filter(([, v]) => v !== null && v !== undefined && v !== '').map(([k, v]) => `${k}=${encodeURIComponent(v)}`).join('&');

function confirmAction(text) {
  const d = $('confirm');
  $('confirm-text').textContent = text;
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
    d.showModal();
  });
}

// ---- charts -----------------------------------------------------------------------------------
// `opts.max`: the top of the scale; `opts.threshold`: [value, label], an alert threshold
// drawn as a red line (above the samples: noted at the top when it is far off the scale).
function chart(svg, lines, opts = {}) {
  const W = 600, H = 160, L = 44, B = 18, T = 6;
  const all = lines.flat();
  const pts = all.filter((p) => p[1] !== null && p[1] !== undefined);
  let out = `<line class="axis" x1="${L}" y1="${H - B}" x2="${W}" y2="${H - B}"/><line class="axis" x1="${L}" y1="${T}" x2="${L}" y2="${H - B}"/>`;
  if (!pts.length) {
    svg.innerHTML = out + `<text x="${W / 2}" y="${H / 2}" text-anchor="middle">no samples yet</text>`;
    return;
  }
  // Every chart spans the whole series, gaps included, so their times line up.
  const x0 = Math.min(...all.map((p) => p[0])), x1 = Math.max(...all.map((p) => p[0]), x0 + 1);
  const top = Math.max(1, ...pts.map((p) => p[1]));
  const [limit, label] = opts.threshold ?? [null, ''];
  // A threshold within twice the samples' top is drawn to scale; one further off is named.
  const inScale = limit !== null && limit <= top * 2;
  const ymax = opts.max ?? Math.max(top, inScale ? limit : 0) * 1.1;
  const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - 4);
  const Y = (y) => H - B - (y / ymax) * (H - B - T);
  for (const f of [0, 0.5, 1]) {
    const v = ymax * f;
    out += `<text x="${L - 4}" y="${Y(v) + 3}" text-anchor="end">${v >= 100 ? Math.round(v) : v.toFixed(v < 1 ? 2 : 1)}</text>`;
  }
  out += `<text x="${L}" y="${H - 4}">${new Date(x0).toLocaleTimeString()}</text><text x="${W}" y="${H - 4}" text-anchor="end">${new Date(x1).toLocaleTimeString()}</text>`;
  if (limit !== null) {
    if (inScale || opts.max !== undefined) {
      out += `<line class="threshold" x1="${L}" y1="${Y(limit).toFixed(1)}" x2="${W}" y2="${Y(limit).toFixed(1)}"/><text class="threshold-label" x="${W - 4}" y="${(Y(limit) - 3).toFixed(1)}" text-anchor="end">${esc(label)}</text>`;
    } else {
      out += `<text class="threshold-label" x="${W - 4}" y="${T + 10}" text-anchor="end">${esc(label)} (off the scale)</text>`;
    }
  }
  lines.forEach((line, i) => {
    let d = '';
    let dots = '';
    const has = (j) => line[j] && line[j][1] !== null && line[j][1] !== undefined;
    line.forEach(([x, y], j) => {
      if (!has(j)) return;
      d += `${has(j - 1) ? 'L' : 'M'}${X(x).toFixed(1)},${Y(y).toFixed(1)}`;
      // A sample with no neighbour draws no line: it is drawn as a dot.
      if (!has(j - 1) && !has(j + 1)) dots += `<circle class="dot${i}" cx="${X(x).toFixed(1)}" cy="${Y(y).toFixed(1)}" r="2.5"/>`;
    });
    out += `<path class="l${i}" d="${d}"/>${dots}`;
  });
  svg.innerHTML = out;
}

// The alerts the broker's rules say are pending or firing now (the same rules as
// rocklet-alerts.yml, evaluated by the broker over this series).
function showAlerts(alerts, now) {
  const box = $('alerts');
  box.hidden = !alerts.length;
  const value = (a) => (a.threshold < 1 ? `${(a.value * 100).toFixed(1)} %` : `${Math.round(a.value)}`);
  box.innerHTML = alerts.length ? `<b>Alerts</b><ul>${alerts.map((a) => `<li class="${esc(a.state)}" data-alert="${esc(a.alert)}">${esc(a.alert)} (${esc(a.state)} for ${esc(ms(now - a.since))}): ${esc(value(a))} ${esc(a.what)}; runbook: docs/runbooks.md#${esc(a.runbook)}</li>`).join('')}</ul>` : '';
}

// Cluster mode: the node's broker group (role, master, epoch, SyncStateSet, lag). On a
// replica, actions are carried out by the master (the broker forwards them).
function showCluster(c) {
  state.cluster = c;
  const box = $('cluster');
  box.hidden = !c;
  if (!c) return;
  const m = c.master ? `node ${esc(c.master.node)} at ${esc(c.master.advertise)}, epoch ${esc(c.master.epoch)}` : 'none (an election is due)';
  const lag = c.replicas.length
    ? c.replicas.map((r) => `node ${esc(r.node)}: ${esc(r.lag_bytes)} B / ${esc(ms(r.lag_ms))} behind${r.in_sync ? ', in sync' : ''}`).join('; ')
    : '–';
  const note = c.role === 'replica'
    ? ` <span class="note">Actions on this page are carried out by the master; checks run there.</span>`
    : '';
  box.innerHTML = `Broker group <b>${esc(c.broker_name)}</b> · this node: ${esc(c.node)} (<span class="role" data-role="${esc(c.role)}">${esc(c.role)}</span>) · master: <span id="cluster-master">${m}</span> · SyncStateSet: ${c.sync_state_set ? esc(c.sync_state_set.join(', ')) : '–'} (min ${esc(c.min_in_sync_replicas)}) · lag (${esc(c.lag_from)}): ${lag}.${note}`;
}

// ---- views ------------------------------------------------------------------------------------
async function overview() {
  const o = await api('/api/overview');
  const s = o.stats;
  // The cards sum up the last minute of samples.
  const lastAt = o.series.length ? o.series[o.series.length - 1].at : 0;
  const recent = o.series.filter((x) => x.at > lastAt - 60000);
  const sum = (f) => recent.reduce((a, x) => a + (f(x) ?? 0), 0);
  const secs = Math.max(1, (recent.length * o.step_ms) / 1000);
  const stored = sum((x) => x.stored_per_s * (o.step_ms / 1000)) / secs;
  const sent = sum((x) => x.checks_sent), answered = sum((x) => x.checks_answered);
  const ends = sum((x) => x.end_transactions);
  const latency = ends ? sum((x) => (x.end_transaction_mean_ms ?? 0) * x.end_transactions) / ends : null;
  const cards = [
    ['half-backlog', o.half_backlog, 'half backlog (pending transactions)'],
    ['throughput', stored.toFixed(1), 'messages stored / s (last minute)'],
    ['check-success', sent ? `${((answered / sent) * 100).toFixed(0)}%` : '–', `check success, last minute (${answered} / ${sent})`],
    ['latency', latency === null ? '–' : `${latency.toFixed(2)} ms`, `END_TRANSACTION mean, last minute (${ends} calls)`],
    ['committed', s.committed, 'committed'],
    ['rolled-back', s.rolled_back, 'rolled back'],
    ['checks', `${s.checks_answered} / ${s.checks_sent}`, 'checks answered / issued'],
    ['delays', o.delay_backlog, 'delayed, not yet due'],
    ['dead-lettered', s.dead_lettered, 'dead-lettered'],
    ['stored', s.messages_stored, 'messages stored'],
  ];
  $('cards').innerHTML = cards.map(([id, v, label]) => `<div class="card" id="card-${id}"><b>${esc(v)}</b><span>${esc(label)}</span></div>`).join('');
  const S = o.series;
  chart($('chart-throughput'), [S.map((x) => [x.at, x.stored_per_s]), S.map((x) => [x.at, x.committed_per_s])]);
  const th = o.thresholds;
  chart($('chart-backlog'), [S.map((x) => [x.at, x.half_backlog])], { threshold: [th.RockletHalfBacklogHigh, `alert above ${th.RockletHalfBacklogHigh}`] });
  chart($('chart-checks'), [S.map((x) => [x.at, x.check_success])], { max: 1, threshold: [1 - th.RockletTransactionCheckTimeoutRateHigh, `alert below ${Math.round((1 - th.RockletTransactionCheckTimeoutRateHigh) * 100)} %`] });
  showAlerts(o.alerts, o.now);
  showCluster(o.cluster);
  chart($('chart-latency'), [S.map((x) => [x.at, x.end_transaction_mean_ms]), S.map((x) => [x.at, x.end_transaction_p99_ms])]);
}

function pager(view, shown) {
  const el = document.querySelector(`.pager[data-for="${view}"]`);
  const n = state.pages[view].length + 1;
  el.innerHTML = `<button data-act="prev" ${state.pages[view].length ? '' : 'disabled'}>‹ Previous</button><span>page ${n} · ${shown} shown</span><button data-act="next" ${state.next[view] === null || state.next[view] === undefined ? 'disabled' : ''}>Next ›</button>`;
  el.querySelector('[data-act=prev]').onclick = () => { state.cursor[view] = state.pages[view].pop() ?? null; refresh(); };
  el.querySelector('[data-act=next]').onclick = () => { state.pages[view].push(state.cursor[view]); state.cursor[view] = state.next[view]; refresh(); };
}

async function topics() {
  const r = await api(`/api/topics?${qs(state.topicName ? { name: state.topicName } : { after: state.cursor.topics, limit: PAGE })}`);
  state.next.topics = r.next;
  const rows = r.items.map((t) => `<tr data-topic="${esc(t.name)}"><td><code>${esc(t.name)}</code></td><td>${esc(t.kind)}</td>
    <td>${t.queues.map((q) => `<span class="tag" title="offsets ${q.min_offset}..${q.next_offset}">q${q.queue_id}: ${q.messages}</span>`).join('')}</td>
    <td class="num">${t.messages}</td>
    <td>${t.groups.length ? t.groups.map((g) => `<span class="tag group" data-group="${esc(g.group)}">${esc(g.group)} (${esc(g.mode)}): lag <b class="lag">${g.lag}</b>${g.inflight ? `, ${g.inflight} in flight` : ''}</span>`).join('') : '<span class="empty">none</span>'}</td></tr>`);
  $('topics-table').tBodies[0].innerHTML = rows.join('') || '<tr><td colspan="5" class="empty">no topics</td></tr>';
  pager('topics', r.items.length);
}

async function pending() {
  const r = await api(`/api/pending?${qs({ after: state.cursor.pending, limit: PAGE })}`);
  state.next.pending = r.next;
  $('pending-total').textContent = `${r.total} pending transaction(s)`;
  const ids = new Set(r.items.map((t) => t.transaction_id));
  for (const id of [...state.selected]) if (!ids.has(id)) state.selected.delete(id);
  $('pending-table').tBodies[0].innerHTML = r.items.map((t) => `<tr data-txn="${esc(t.transaction_id)}">
    <td><input type="checkbox" class="pick" ${state.selected.has(t.transaction_id) ? 'checked' : ''}></td>
    <td><code>${esc(t.transaction_id)}</code><br><small class="mono">${esc(t.message_id)}</small></td>
    <td>${esc(t.producer_group)}</td><td>${esc(t.topic)} <small>q${t.queue_id}</small></td>
    <td>${(t.keys || []).map((k) => `<span class="tag">${esc(k)}</span>`).join('')}</td>
    <td class="num">${ms(t.age_ms)}</td><td class="num">${t.checks}</td>
    <td class="num">${state.cluster?.role === 'replica' ? 'on the master' : t.next_check_in_ms === null ? '–' : ms(t.next_check_in_ms)}</td>
    <td><span class="tag state state-${esc(t.state)}">${t.state === 'parked' ? 'parked (no producer online)' : 'waiting for check'}</span></td>
    <td><button class="commit">Commit</button> <button class="rollback">Roll back</button></td></tr>`).join('') || '<tr><td colspan="10" class="empty">no pending transaction</td></tr>';
  for (const tr of $('pending-table').tBodies[0].rows) {
    const id = tr.dataset.txn;
    if (!id) continue;
    tr.querySelector('.pick').onchange = (e) => { if (e.target.checked) state.selected.add(id); else state.selected.delete(id); pickState(); };
    tr.querySelector('.commit').onclick = () => resolve([id], 'commit');
    tr.querySelector('.rollback').onclick = () => resolve([id], 'rollback');
  }
  pickState();
  pager('pending', r.items.length);
}

function pickState() {
  const n = state.selected.size;
  $('commit-selected').disabled = !n;
  $('rollback-selected').disabled = !n;
  $('commit-selected').textContent = `Commit selected (${n})`;
  $('rollback-selected').textContent = `Roll back selected (${n})`;
}

async function resolve(ids, resolution) {
  const verb = resolution === 'commit' ? 'Commit' : 'Roll back';
  const ok = await confirmAction(`${verb} ${ids.length} transaction(s)? ${resolution === 'commit' ? 'Consumers will receive the message(s).' : 'The message(s) will be discarded.'} This is written to the broker's log as an audit record.\n\n${ids.join('\n')}`);
  if (!ok) return;
  try {
    const r = await api('/api/resolve', { resolution, transactions: ids });
    const failed = r.results.filter((x) => !x.ok);
    ids.forEach((id) => state.selected.delete(id));
    showError(failed.length ? new Error(failed.map((f) => `${f.transaction_id}: ${f.error}`).join('; ')) : null);
  } catch (e) { showError(e); }
  refresh();
}

function timeline(events) {
  if (!events.length) return '<p class="empty">no events</p>';
  // Times in details ("attempt 1 until 1796166223832") read as times.
  const detail = (d) => String(d || '').replace(/\b(until|due) (\d{13})\b/g, (_, w, t) => `${w} ${when(Number(t))}`);
  return `<ol class="timeline">${events.map((e) => `<li class="k-${esc(e.kind)}"><time>${esc(when(e.at))}</time><b>${esc(e.kind.replace(/_/g, ' '))}</b> ${esc(detail(e.detail))}${e.topic ? ` <small>${esc(e.topic)}</small>` : ''}</li>`).join('')}</ol>`;
}

async function message() {
  const s = state.lastSearch;
  if (!s) { $('results').innerHTML = '<p class="empty">Search for a message by key, message id or queue offset in a topic.</p>'; return; }
  const p = { topic: s.topic };
  if (s.by === 'offset') { const [q, o] = s.value.split(':'); p.queue = q; p.offset = o; } else p[s.by] = s.value;
  const r = await api(`/api/message?${qs(p)}`);
  $('results').innerHTML = r.items.map((f) => {
    const m = f.message;
    const props = [['message id', m.message_id], ['topic', `${m.topic} q${m.queue_id} @ ${m.queue_offset}`], ['log offset', m.offset], ['tag', m.tag], ['keys', (m.keys || []).join(' ')],
      ['born', when(m.born)], ['stored', when(m.stored)], ['transactional', m.transactional ? 'yes (committed half)' : 'no'], ['record in', f.record_topic], ['reconsumed', m.reconsume_times],
      ...m.properties.map(([k, v]) => [k, v]), ['body', `${m.body}${m.body_bytes > m.body.length ? ' …' : ''} (${m.body_bytes} bytes)`]];
    return `<div class="found" data-message-id="${esc(m.message_id)}"><h3>${esc(m.message_id)}</h3>
      <dl class="props">${props.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`).join('')}</dl>
      <h4>Consumer groups</h4>${f.groups.length ? f.groups.map((g) => `<span class="tag">${esc(g.group)} (${esc(g.mode)}): ${g.past_it ? 'past it' : 'not yet'}</span>`).join('') : '<p class="empty">none has read this queue</p>'}
      <h4>History</h4>${timeline(f.story)}${f.story_complete ? '' : '<p class="empty">No events since the broker started: the history shows what the log tells.</p>'}
      ${f.retries.length ? `<h4>Retries</h4>${f.retries.map((d) => `<div><code>${esc(d.topic)}</code> @ ${d.queue_offset}, reconsumed ${d.reconsume_times} ${timeline(d.story)}</div>`).join('')}` : ''}
      ${f.dead_letters.length ? `<h4>Dead letters</h4>${f.dead_letters.map((d) => `<div><code>${esc(d.topic)}</code> @ ${d.queue_offset} ${timeline(d.story)}</div>`).join('')}` : ''}</div>`;
  }).join('') || '<p class="empty">No message found (only committed and delivered messages are visible).</p>';
}

async function delays() {
  const r = await api(`/api/delays?${qs({ after: state.cursor.delays, limit: PAGE })}`);
  state.next.delays = r.next;
  $('delays-total').textContent = `${r.total} delayed message(s) not yet delivered`;
  $('delays-table').tBodies[0].innerHTML = r.items.map((d) => `<tr><td>${esc(when(d.due))}</td><td class="num">${ms(d.due_in_ms)}</td><td>${esc(d.topic)}</td><td class="num">${d.queue_id}</td><td class="mono">${esc(d.message_id)}</td><td>${(d.keys || []).map((k) => `<span class="tag">${esc(k)}</span>`).join('')}</td><td>${esc(d.tag)}</td></tr>`).join('') || '<tr><td colspan="7" class="empty">no delayed message</td></tr>';
  pager('delays', r.items.length);
}

async function dlq() {
  const r = await api(`/api/dlq?${qs({ after: state.cursor.dlq, limit: PAGE })}`);
  state.next.dlq = r.next;
  $('dlq-table').tBodies[0].innerHTML = r.items.map((d) => `<tr data-dlq="${esc(d.topic)}"><td><code>${esc(d.topic)}</code></td><td>${esc(d.group)}</td><td class="num">${d.messages}</td><td><button class="open">Messages</button></td></tr>`).join('') || '<tr><td colspan="4" class="empty">no dead-letter topic</td></tr>';
  for (const tr of $('dlq-table').tBodies[0].rows) if (tr.dataset.dlq) tr.querySelector('.open').onclick = () => { state.dlqOpen = { topic: tr.dataset.dlq, after: null }; refresh(); };
  pager('dlq', r.items.length);
  if (!state.dlqOpen) { $('dlq-messages').innerHTML = ''; return; }
  const m = await api(`/api/dlq/messages?${qs({ topic: state.dlqOpen.topic, after: state.dlqOpen.after, limit: PAGE })}`);
  $('dlq-messages').innerHTML = `<h3>${esc(state.dlqOpen.topic)}</h3><table><thead><tr><th>Offset</th><th>Message id</th><th>Original topic</th><th>Keys</th><th>Reconsumed</th><th>Stored</th><th></th></tr></thead><tbody>${m.items.map((x) => `<tr data-offset="${x.queue_offset}"><td class="num">${x.queue_offset}</td><td class="mono">${esc(x.original_message_id || x.message_id)}</td><td>${esc(x.original_topic)}</td><td>${(x.keys || []).map((k) => `<span class="tag">${esc(k)}</span>`).join('')}</td><td class="num">${x.reconsume_times}</td><td>${esc(when(x.stored))}</td><td><button class="resend">Resend to ${esc(x.original_topic)}</button></td></tr>`).join('') || '<tr><td colspan="7" class="empty">empty</td></tr>'}</tbody></table>${m.next !== null ? '<button id="dlq-more">Next ›</button>' : ''}`;
  for (const tr of $('dlq-messages').querySelectorAll('tr[data-offset]')) {
    tr.querySelector('.resend').onclick = async () => {
      const off = Number(tr.dataset.offset);
      if (!(await confirmAction(`Resend the dead letter at offset ${off} of ${state.dlqOpen.topic} to its original topic? Its consumers will receive it again. This is written to the broker's log as an audit record.`))) return;
      try {
        const r2 = await api('/api/dlq/resend', { topic: state.dlqOpen.topic, offsets: [off] });
        const bad = r2.results.filter((x) => !x.ok);
        showError(bad.length ? new Error(bad.map((b) => b.error).join('; ')) : null);
      } catch (e) { showError(e); }
      refresh();
    };
  }
  const more = $('dlq-more');
  if (more) more.onclick = () => { state.dlqOpen.after = m.next; refresh(); };
}

const VIEWS = { overview, topics, pending, message, delays, dlq };

async function refresh() {
  clearTimeout(state.timer);
  try {
    await VIEWS[state.view]();
    if (state.view !== 'pending' || $('error').hidden) showError(null);
    $('updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    showError(e);
  }
  const every = Number($('refresh').value);
  if (every > 0) state.timer = setTimeout(refresh, every);
}

function show(view) {
  state.view = VIEWS[view] ? view : 'overview';
  for (const s of document.querySelectorAll('.view')) s.hidden = s.id !== `view-${state.view}`;
  for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.dataset.view === state.view);
  refresh();
}

window.addEventListener('hashchange', () => show(location.hash.slice(1)));
$('refresh').onchange = refresh;
$('commit-selected').onclick = () => resolve([...state.selected], 'commit');
$('rollback-selected').onclick = () => resolve([...state.selected], 'rollback');
$('pending-all').onchange = (e) => {
  for (const tr of $('pending-table').tBodies[0].rows) {
    if (!tr.dataset.txn) continue;
    tr.querySelector('.pick').checked = e.target.checked;
    if (e.target.checked) state.selected.add(tr.dataset.txn); else state.selected.delete(tr.dataset.txn);
  }
  pickState();
};
$('search').onsubmit = (e) => {
  e.preventDefault();
  const f = new FormData(e.target);
  state.lastSearch = { topic: f.get('topic').trim(), by: f.get('by'), value: f.get('value').trim() };
  refresh();
};
$('topic-find').onsubmit = (e) => { e.preventDefault(); state.topicName = new FormData(e.target).get('name').trim(); refresh(); };
$('topic-all').onclick = () => { state.topicName = ''; state.pages.topics = []; state.cursor.topics = null; refresh(); };
// The broker group is shown on every view: read once now, then with each overview.
api('/api/overview').then((o) => showCluster(o.cluster), () => {});
show(location.hash.slice(1) || 'overview');
