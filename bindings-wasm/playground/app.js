// Rocklet playground. The page owns the clock and plays the producer and the consumer; every
// piece of broker state it shows is read back from the core after each step.
import init, { Broker, systemTopics } from './pkg/rocklet_wasm.js';
import { opLabel, opTag } from './names.js';

const GROUP = 'PG';
const CONSUMER = 'CG';
const DEFAULT_CONFIG = { trace: true, default_queues: 2 };
const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
const ICON = {
  play: '<svg viewBox="0 0 10 10" class="i"><path d="M2 1l7 4-7 4z"/></svg>',
  pause: '<svg viewBox="0 0 10 10" class="i"><path d="M2 1h2v8H2zM6 1h2v8H6z"/></svg>',
  step: '<svg viewBox="0 0 10 10" class="i"><path d="M1 1l6 4-6 4zM7.5 1h1.5v8H7.5z"/></svg>',
};
const secs = (ms) => `${(ms / 1000).toFixed(3)} s`;
const short = (ms) => (ms >= 60000 && ms % 60000 === 0 ? `${ms / 60000}m` : ms >= 1000 ? `${+(ms / 1000).toFixed(1)}s` : `${ms}ms`);

let T; // system topic names, from the core
let b; // the broker
const page = {
  playing: false,
  speed: 5,
  checker: 'commit',
  crashed: new Set(), // txns whose producer crashed before END_TRANSACTION (the producer's own state)
  script: [], // preset actions: {at, run}, in time order
  timeline: [],
  selected: null, // commit-log offset shown decoded
  flights: [],
  lastFrame: 0,
  nextBody: 1001,
};

// ---- the producer and the consumer, as the page plays them ------------------------------------

function line(from, to, text, cls = '') {
  page.timeline.push({ at: b.now, from, to, text, cls });
  if (page.timeline.length > 400) page.timeline.splice(0, page.timeline.length - 400);
}

function code(s) {
  return `<code>${esc(s)}</code>`;
}

function guard(fn) {
  try {
    return fn();
  } catch (e) {
    if (e && e.name === 'RockletError') {
      line('P', 'B', `refused: ${code(e.code)} ${esc(e.message)}`, 'error');
      return undefined;
    }
    throw e;
  }
}

function message(extra = {}) {
  const m = { topic: $('topic').value.trim() || 'Orders', body: $('body').value || 'x' };
  const tag = $('tag').value.trim();
  if (tag) m.tag = tag;
  return { ...m, ...extra };
}

function bumpBody() {
  const m = /^(.*#)(\d+)$/.exec($('body').value);
  if (m) $('body').value = `${m[1]}${Number(m[2]) + 1}`;
}

const actions = {
  send(extra = {}, what = 'SEND_MESSAGE') {
    const m = message(extra);
    const r = guard(() => b.send(m));
    if (r) line('P', 'B', `${what} ${code(m.topic)} “${esc(m.body)}” → SEND_OK, queue ${r.queueId}, commit-log offset ${r.offset}`);
    bumpBody();
    settle();
  },
  sendDelayed() {
    const level = Number($('delay-level').value);
    actions.send({ delayLevel: level }, `SEND_MESSAGE (DELAY=${level})`);
  },
  sendAt() {
    const at = b.now + Math.max(0, Number($('deliver-in').value) || 0);
    actions.send({ deliverAtMs: at }, `SEND_MESSAGE (TIMER_DELIVER_MS=${at})`);
  },
  sendBatch() {
    const base = message();
    const batch = [1, 2, 3].map((i) => ({ ...base, body: `${base.body} (${i}/3)` }));
    const rs = guard(() => b.sendBatch(batch));
    if (rs) line('P', 'B', `SEND_BATCH_MESSAGE ${code(base.topic)} ×3 → one queue (${rs[0].queueId}), queue offsets ${rs.map((r) => r.queueOffset).join(', ')}`);
    bumpBody();
    settle();
  },
  begin() {
    const m = message();
    const r = guard(() => b.prepare(GROUP, m));
    if (r) {
      line('P', 'B', `SEND_MESSAGE half (TRAN_MSG=true, PGROUP=${GROUP}) “${esc(m.body)}” → txn ${code(r.txn)}; the local transaction runs now`, 'half');
    }
    bumpBody();
    settle();
    return r?.txn;
  },
  end(txn, resolution) {
    const name = { commit: 'COMMIT_MESSAGE', rollback: 'ROLLBACK_MESSAGE', unknown: 'UNKNOW' }[resolution];
    const r = guard(() => b.end(txn, resolution, { group: GROUP }));
    if (r) line('P', 'B', `END_TRANSACTION ${name} txn ${code(txn)}${r.duplicate ? ' (duplicate: already resolved)' : ''}`, resolution);
    settle();
  },
  crash(txn) {
    page.crashed.add(txn);
    line('P', 'P', `producer crashed before END_TRANSACTION for ${code(txn)}: the half message stays; the broker will check back`, 'crash');
    render();
  },
  setChecker(v) {
    page.checker = v;
    $('checker').value = v;
    b.setProducerOnline(GROUP, v !== 'offline');
    line('P', 'B', v === 'offline' ? `no producer of ${GROUP} online: checks wait (parked)` : `producer of ${GROUP} online: checks are answered ${code(v.toUpperCase())}`);
    settle();
  },
  consume(force = false) {
    if (!$('auto-consume').checked && !force) return false;
    let any = false;
    for (const t of b.topics()) {
      if (t.name === T.checkMax || t.name.startsWith('%')) continue;
      for (const q of t.queues) {
        for (;;) {
          const r = b.pull({ group: CONSUMER, topic: t.name, queueId: q.queueId, max: 32, autoCommit: true });
          if (r.messages.length === 0) break;
          any = true;
          const bodies = r.messages.map((m) => `“${esc(m.body)}”`).join(', ');
          line('B', 'C', `PULL_MESSAGE ${code(t.name)} queue ${q.queueId}: ${bodies}; consumer offset → ${r.nextOffset}`, 'consume');
        }
      }
    }
    return any;
  },
};

// ---- outputs of the core -> timeline, check answers, animations --------------------------------

const TRACE = {
  stored: (e) => ['B', 'B', `stored in ${code(e.topic)} (commit log offset ${e.offset}), consume queue unit written`, 'stored'],
  half_stored: (e) => ['B', 'B', `half message in ${code(T.half)} (real topic ${code(e.topic)} in REAL_TOPIC): invisible to consumers`, 'half'],
  check_sent: (e) => ['B', 'B', `${esc(opLabel('c'))} record in ${code(T.op)}: ${esc(e.detail)} sent`, 'check'],
  check_parked: () => ['B', 'B', `check due, but no producer of ${GROUP} is online: parked, no attempt used`, 'check'],
  committed: (e) => ['B', 'B', `${esc(opLabel('d'))} record (COMMIT) in ${code(T.op)} → half message at ${e.offset} visible in ${code(e.topic)}`, 'commit'],
  rolled_back: (e) => ['B', 'B', `${esc(opLabel('d'))} record (ROLLBACK) in ${code(T.op)} → half message at ${e.offset} discarded, never visible`, 'rollback'],
  check_max_reached: () => ['B', 'B', `transactionCheckMax reached: ${esc(opLabel('x'))} record, message moved to ${code(T.checkMax)}`, 'rollback'],
  half_expired: () => ['B', 'B', `half message older than half_reserve_ms: dropped (${esc(opLabel('e'))})`, 'rollback'],
  delay_stored: (e) => ['B', 'B', `delayed: stored in ${code(T.schedule)} until ${secs(Number(e.detail.replace(/\D/g, '')))} (real topic ${code(e.topic)})`, 'delay'],
  delivered: (e) => ['B', 'B', `due: delivered to ${code(e.topic)} (record in ${code(T.delayOp)})`, 'delay'],
  received: (e) => ['B', 'C', `POP ${code(e.topic)}: ${esc(e.detail)}`, 'consume'],
  acked: (e) => ['C', 'B', `ACK ${code(e.topic)} ${esc(e.detail)}`, 'consume'],
  redelivered: (e) => ['B', 'C', `redelivered ${code(e.topic)}: ${esc(e.detail)}`, 'consume'],
  dead_lettered: (e) => ['B', 'B', `dead-lettered to ${code(e.topic)}`, 'rollback'],
  offset_committed: null, // shown with the pull that caused it
};

const FLY = {
  stored: (e) => ['producer-lane', `cq-${e.offset}`, 'stored'],
  half_stored: (e) => ['producer-lane', `half-${e.offset}`, 'half'],
  check_sent: (e) => [`half-${e.offset}`, 'checker-row', 'check'],
  committed: (e) => [`half-${e.offset}`, `cq-${e.offset}`, 'commit'],
  rolled_back: (e) => [`half-${e.offset}`, 'ops', 'rollback'],
  check_max_reached: (e) => [`half-${e.offset}`, `cq-${e.offset}`, 'rollback'],
  delay_stored: (e) => ['producer-lane', `delay-${e.offset}`, 'delay'],
  delivered: (e) => [`delay-${e.offset}`, `cq-${e.offset}`, 'delay'],
};

/** Drains the core's outputs: plays the producer's checker, logs, queues animations. */
function pump() {
  let any = false;
  for (let round = 0; round < 100; round++) {
    const outs = b.drain();
    if (outs.length === 0) break;
    any = true;
    for (const o of outs) {
      if (o.type === 'trace') {
        const t = TRACE[o.kind];
        if (t) line(...t(o));
        const f = FLY[o.kind];
        if (f) page.flights.push({ ...flightOf(f(o)), label: labelAt(o.offset) });
      } else if (o.type === 'check') {
        line('B', 'P', `CHECK_TRANSACTION_STATE #${o.check} for txn ${code(o.txn)} “${esc(o.message.body)}”`, 'check');
        if (page.checker !== 'offline') {
          const name = { commit: 'COMMIT_MESSAGE', rollback: 'ROLLBACK_MESSAGE', unknown: 'UNKNOW' }[page.checker];
          const r = guard(() => b.end(o.txn, page.checker, { fromCheck: true }));
          if (r) line('P', 'B', `END_TRANSACTION ${name} (answer to check #${o.check}, checkLocalTransaction)`, page.checker);
          page.flights.push({ from: 'checker-row', to: `half-${o.txn ? parseInt(o.txn, 16) : 0}`, cls: page.checker, label: name });
        }
      }
    }
  }
  return any;
}

function flightOf([from, to, cls]) {
  return { from, to, cls };
}

let bodyByOffset = new Map();
function labelAt(offset) {
  return bodyByOffset.get(offset) ?? `@${offset}`;
}

/** After any call: answer checks, let the consumer pull, redraw. */
function settle() {
  for (let i = 0; i < 20; i++) {
    const a = pump();
    const c = actions.consume();
    if (!a && !c) break;
  }
  render();
}

/** The page's clock loop: every check and delivery happens at its own time, preset actions at theirs. */
function advance(target) {
  for (let guardN = 0; guardN < 10000; guardN++) {
    const next = b.nextEventAt();
    const act = page.script[0];
    if (act && act.at <= target && (next === undefined || act.at <= next)) {
      page.script.shift();
      b.advanceTo(act.at);
      settleQuiet();
      act.run();
      continue;
    }
    if (next === undefined || next > target) break;
    b.stepToNextEvent();
    settleQuiet();
  }
  b.advanceTo(Math.max(target, b.now));
  settleQuiet();
}

let dirty = false;
function settleQuiet() {
  for (let i = 0; i < 20; i++) {
    const a = pump();
    const c = actions.consume();
    if (a || c) dirty = true;
    if (!a && !c) break;
  }
}

function step() {
  const next = nextInteresting();
  if (next === undefined) return;
  advance(next);
  render();
}

/** The next time something happens: the core's poll_timeout, or a preset's next action. */
function nextInteresting() {
  const n = b.nextEventAt();
  const a = page.script[0]?.at;
  if (n === undefined) return a;
  if (a === undefined) return n;
  return Math.min(n, a);
}

// ---- rendering (from the core, every time) -------------------------------------------------------

const field = (r, name) => r.fields.find((f) => f.name === name)?.value;
const prop = (r, key) => r.properties.find((p) => p.key === key)?.value;

function render() {
  dirty = false;
  const before = positions();
  const recs = b.rawRecords(0, 2000);
  bodyByOffset = new Map(recs.map((r) => [r.offset, r.body]));
  const pendingTx = new Map(b.pendingTransactions().map((p) => [p.offset, p]));
  const pendingDl = new Map(b.pendingDelays().map((d) => [d.offset, d]));
  const ops = recs.filter((r) => r.topic === T.op);
  const opsFor = new Map();
  for (const o of ops) {
    const k = field(o, 'PREPARED_TRANSACTION_OFFSET');
    if (!opsFor.has(k)) opsFor.set(k, []);
    opsFor.get(k).push(o);
  }
  const cfg = b.config();
  const halfStatus = (h) => {
    const p = pendingTx.get(h.offset);
    if (p) {
      if (p.nextCheck === null) return { cls: 'pending', text: `pending · ${p.checks} checks · parked (no producer online)` };
      return { cls: 'pending', text: `pending · ${p.checks}/${cfg.transaction_check_max} checks · next check at ${secs(p.nextCheck)}`, due: p.nextCheck };
    }
    const end = (opsFor.get(h.offset) ?? []).find((o) => prop(o, 'TAGS') !== 'c');
    if (!end) return { cls: 'pending', text: 'pending' };
    const tag = prop(end, 'TAGS');
    if (tag === 'd') return end.transactionType === 'commit' ? { cls: 'commit', badge: 'committed', text: 'committed (op "d")' } : { cls: 'rollback', badge: 'rolled back', text: 'rolled back (op "d")' };
    if (tag === 'x') return { cls: 'rollback', badge: 'check max', text: `check max → ${T.checkMax}` };
    if (tag === 'e') return { cls: 'rollback', badge: 'expired', text: 'expired (Rocklet\'s op "e")' };
    return { cls: '', text: tag };
  };
  const halves = recs.filter((r) => r.topic === T.half);

  // producer: its local transactions are its half messages (read from the log)
  $('txns').innerHTML = halves.filter((h) => prop(h, 'PGROUP') === GROUP).reverse().map((h) => {
    const txn = h.offset.toString(16).toUpperCase().padStart(16, '0');
    const s = halfStatus(h);
    const crashed = page.crashed.has(txn);
    const open = pendingTx.has(h.offset);
    const buttons = open && !crashed
      ? `<div class="buttons"><button data-end="commit" data-txn="${txn}" class="commit">Commit</button><button data-end="rollback" data-txn="${txn}" class="rollback">Rollback</button><button data-end="unknown" data-txn="${txn}">Unknown</button><button data-crash="${txn}" class="crash">Crash producer</button></div>`
      : crashed && open ? '<div class="note crash">producer crashed: no END_TRANSACTION will come; the broker will check back</div>' : '';
    return `<div class="item txn ${s.cls}" data-testid="txn" data-txn="${txn}"><div class="head"><b>“${esc(h.body)}”</b><span class="badge ${s.cls}">${esc(s.badge ?? s.cls)}</span></div><div class="meta">txn ${code(txn)} → ${code(prop(h, 'REAL_TOPIC'))}</div>${buttons}</div>`;
  }).join('') || '<div class="empty">no transaction yet — “Begin transaction”</div>';

  // broker: half queue
  $('halves').innerHTML = halves.map((h) => {
    const s = halfStatus(h);
    return `<div class="item chip-row ${s.cls}" data-k="half-${h.offset}" data-rec="${h.offset}"><span class="chip ${s.cls}">“${esc(h.body)}”</span><span class="meta">@${h.offset} · ${esc(s.text)}</span></div>`;
  }).join('') || '<div class="empty">no half message</div>';

  // op queue
  $('ops').innerHTML = ops.map((o) => {
    const tag = prop(o, 'TAGS');
    const kind = tag === 'd' ? (o.transactionType === 'commit' ? 'commit' : 'rollback') : tag === 'c' ? 'check' : 'rollback';
    const times = prop(o, 'TRANSACTION_CHECK_TIMES');
    const t = opTag(tag);
    return `<div class="item chip-row" data-rec="${o.offset}" title="${esc(t.meaning)}"><span class="chip op ${kind}">"${esc(tag)}"</span><span class="meta">${esc(t.origin)}'s ${esc(t.name)}${tag === 'd' ? ` · ${o.transactionType.toUpperCase()}` : ''}${times ? ` #${times}` : ''} → half @${field(o, 'PREPARED_TRANSACTION_OFFSET')}</span></div>`;
  }).join('') || '<div class="empty">no op record</div>';

  // pending checks, with deadlines
  $('checks').innerHTML = [...pendingTx.values()].map((p) => {
    const due = p.nextCheck;
    return `<div class="item countdown" data-due="${due ?? ''}" data-from="${due === null ? '' : due - (p.checks === 0 ? cfg.transaction_timeout_ms : cfg.transaction_check_interval_ms)}"><div class="head"><b>“${esc(labelAt(p.offset))}”</b><span class="meta">${due === null ? 'parked' : `check #${p.checks + 1} at ${secs(due)}`}</span></div><div class="bar"><i></i></div><div class="meta">txn ${code(p.txn)} · ${esc(p.group)} · ${p.checks}/${cfg.transaction_check_max}</div></div>`;
  }).join('') || '<div class="empty">nothing to check</div>';

  // delay queues
  // pending first, soonest first; then the delivered ones, latest first
  const delayed = recs.filter((r) => r.topic === T.schedule || r.topic === T.timer).sort((x, y) => {
    const px = pendingDl.get(x.offset), py = pendingDl.get(y.offset);
    if (px && py) return px.due - py.due || x.offset - y.offset;
    if (px || py) return px ? -1 : 1;
    return y.offset - x.offset;
  });
  $('delays').innerHTML = delayed.map((r) => {
    const p = pendingDl.get(r.offset);
    const due = Number(prop(r, 'TIMER_OUT_MS'));
    const where = r.topic === T.schedule ? `level ${field(r, 'QUEUEID') + 1} (${short(cfg.delay_levels[field(r, 'QUEUEID')])}) · queue ${field(r, 'QUEUEID')}` : `${T.timer}`;
    return `<div class="item chip-row ${p ? 'pending countdown' : 'delivered'}" data-k="delay-${r.offset}" data-rec="${r.offset}" data-due="${p ? due : ''}" data-from="${field(r, 'STORETIMESTAMP')}"><span class="chip delay">“${esc(r.body)}”</span><span class="meta">${esc(where)} · ${p ? `due ${secs(due)}` : 'delivered'} → ${code(prop(r, 'REAL_TOPIC'))}</span>${p ? '<div class="bar"><i></i></div>' : ''}</div>`;
  }).join('') || '<div class="empty">no delayed message</div>';

  // consume queues
  const topics = b.topics();
  $('cqs').innerHTML = topics.map((t) => {
    const queues = t.queues.map((q) => {
      const units = b.consumeQueue(t.name, q.queueId);
      const committed = b.committedOffset(CONSUMER, t.name, q.queueId) ?? 0;
      const chips = units.map((u, i) => {
        const hex = [...u.bytes].map((x) => x.toString(16).padStart(2, '0')).join(' ');
        return `<span class="chip cq ${i < committed ? 'read' : ''}" data-k="cq-${u.offset}" data-rec="${u.offset}" title="queue offset ${i} → commit log ${u.offset}, ${u.size} B, tag hash ${u.tagHash}\nConsumeQueue unit: ${hex}">#${i} “${esc(labelAt(u.offset))}”</span>`;
      }).join('');
      return `<div class="queue"><span class="qid">q${q.queueId}</span><div class="units">${chips || '<span class="empty">—</span>'}</div></div>`;
    }).join('');
    return `<div class="topic ${t.name === T.checkMax ? 'checkmax' : ''}"><div class="tname">${code(t.name)}</div>${queues}</div>`;
  }).join('') || '<div class="empty">no topic yet</div>';

  // consumer: what its group has consumed = messages below its committed offsets (from the core)
  const consumed = [];
  for (const t of topics) {
    for (const q of t.queues) {
      const upto = b.committedOffset(CONSUMER, t.name, q.queueId);
      if (!upto) continue;
      const r = b.pull({ group: CONSUMER, topic: t.name, queueId: q.queueId, offset: 0, max: upto, autoCommit: false });
      consumed.push(...r.messages);
    }
  }
  consumed.sort((x, y) => x.storeTimestamp - y.storeTimestamp || x.offset - y.offset);
  $('consumed').innerHTML = consumed.reverse().map((m) => `<div class="item msg" data-testid="consumer-msg" data-k="con-${m.offset}" data-rec="${m.offset}"><div class="head"><b>“${esc(m.body)}”</b>${m.tag ? `<span class="badge">${esc(m.tag)}</span>` : ''}</div><div class="meta">${code(m.topic)} queue ${m.queueId} · queue offset ${m.queueOffset} · log @${m.offset}</div></div>`).join('') || '<div class="empty">nothing consumed yet</div>';

  // stats
  const s = b.stats();
  $('broker-stats').innerHTML = `log ${b.logEnd} B · ${s.halvesStored} half · ${s.committed} committed · ${s.rolledBack} rolled back · ${s.checksSent} checks`;

  // commit log
  const kindOf = (r) => (r.topic === T.half ? 'half' : r.topic === T.op ? (prop(r, 'TAGS') === 'c' ? 'check' : r.transactionType === 'commit' ? 'commit' : 'rollback') : r.topic === T.schedule || r.topic === T.timer || r.topic === T.delayOp ? 'delay' : r.topic.startsWith('rmq_sys') ? 'state' : 'stored');
  const whatOf = (r) => (r.topic === T.half ? `half “${r.body}”` : r.topic === T.op ? `op "${prop(r, 'TAGS')}"` : r.topic === T.delayOp ? `delivered @${field(r, 'PREPARED_TRANSACTION_OFFSET')}` : r.topic === T.timer || r.topic === T.schedule ? `delayed “${r.body}”` : r.topic.startsWith('rmq_sys') ? 'consumer state' : `“${r.body}”`);
  $('records').innerHTML = recs.map((r) => `<div class="rec ${page.selected === r.offset ? 'sel' : ''}" data-rec="${r.offset}"><span class="off">${r.offset}</span><span class="k ${kindOf(r)}"></span><span class="t" title="${esc(r.topic)}">${esc(r.topic)}</span><span class="what">${esc(whatOf(r))}</span><span class="s">${r.size} B</span></div>`).join('') || '<div class="empty">empty log</div>';
  const sel = recs.find((r) => r.offset === page.selected) ?? [...recs].reverse().find((r) => !r.topic.startsWith('rmq_sys')) ?? recs[recs.length - 1];
  $('record').innerHTML = sel ? recordView(sel) : '';

  // timeline
  const col = { P: 1, B: 2, C: 3 };
  $('timeline').innerHTML = page.timeline.map((e) => {
    const a = col[e.from], z = col[e.to];
    const lo = Math.min(a, z), hi = Math.max(a, z);
    const dir = a === z ? 'self' : a < z ? 'right' : 'left';
    return `<li class="${e.cls}"><span class="at">${secs(e.at)}</span><span class="arrow ${dir}" style="grid-column:${lo + 1} / ${hi + 2}"><i></i></span><span class="txt">${e.text}</span></li>`;
  }).join('');
  const tl = $('timeline');
  tl.scrollTop = tl.scrollHeight;

  updateClock();
  animate(before);
}

function recordView(r) {
  const colors = ['#e0ecff', '#fde9d9', '#e3f6e8', '#f3e5f5', '#fff4c2', '#e0f7fa', '#fce4ec'];
  const fieldOf = new Array(r.size);
  r.fields.forEach((f, i) => {
    for (let x = f.at; x < f.at + f.len; x++) fieldOf[x] = i;
  });
  const bytes = [...r.bytes].map((x, i) => `<span class="byte f${fieldOf[i]}" style="background:${colors[fieldOf[i] % colors.length]}" title="${esc(r.fields[fieldOf[i]].name)}">${x.toString(16).padStart(2, '0')}</span>`).join('');
  const rows = r.fields.map((f, i) => {
    let value = esc(f.value);
    if (f.name === 'PROPERTIES') value = r.properties.map((p) => `${esc(p.key)}=${esc(p.value)}`).join(' · ') || '(none)';
    if (f.name === 'BODY' && /[\x00-\x08\x0e-\x1f]/.test(String(f.value))) value = '(binary)';
    return `<tr class="f${i}"><td class="swatch" style="background:${colors[i % colors.length]}"></td><td>${f.at}</td><td>${f.len}</td><td><code>${esc(f.name)}</code></td><td class="v">${value}</td></tr>`;
  }).join('');
  return `<div class="rec-title">record @${r.offset} · ${r.size} bytes · ${code(r.topic)} · SYSFLAG ${esc(r.transactionType)}</div><div class="rec-split"><table><thead><tr><th></th><th>at</th><th>len</th><th>field</th><th>value</th></tr></thead><tbody>${rows}</tbody></table><div class="hex">${bytes}</div></div>`;
}

function updateClock() {
  $('now').textContent = secs(b.now);
  const next = nextInteresting();
  const label = next === undefined ? `${ICON.step} Step to next event` : `${ICON.step} Step to next event <small>(${secs(next)})</small>`;
  if ($('step').innerHTML !== label) $('step').innerHTML = label;
  $('step').disabled = next === undefined;
  for (const el of document.querySelectorAll('.countdown[data-due]')) {
    const due = Number(el.dataset.due), from = Number(el.dataset.from);
    const i = el.querySelector('.bar i');
    if (!i || !el.dataset.due) continue;
    const frac = due > from ? Math.min(1, Math.max(0, (b.now - from) / (due - from))) : 1;
    i.style.width = `${(frac * 100).toFixed(1)}%`;
  }
}

// ---- animation: messages fly between lanes ------------------------------------------------------

function positions() {
  const m = new Map();
  for (const el of document.querySelectorAll('[data-k]')) m.set(el.dataset.k, el.getBoundingClientRect());
  return m;
}

function rectOf(key, before) {
  const el = document.querySelector(`[data-k="${key}"]`) ?? document.getElementById(key);
  if (el) return el.getBoundingClientRect();
  return before.get(key);
}

function animate(before) {
  // new consumer items fly in from their consume-queue unit
  for (const el of document.querySelectorAll('[data-k^="con-"]')) {
    if (!before.has(el.dataset.k)) page.flights.push({ from: `cq-${el.dataset.k.slice(4)}`, to: el.dataset.k, cls: 'consume', label: el.querySelector('b')?.textContent ?? '' });
  }
  const flights = page.flights.splice(0, page.flights.length).slice(-12);
  const dur = Math.max(250, 900 / Math.sqrt(page.speed));
  flights.forEach((f, i) => {
    const a = rectOf(f.from, before), z = rectOf(f.to, before);
    if (!a || !z || (a.width === 0 && z.width === 0)) return;
    const token = document.createElement('div');
    token.className = `flight ${f.cls}`;
    token.textContent = f.label;
    const x0 = a.left + a.width / 2, y0 = a.top + a.height / 2;
    const x1 = z.left + z.width / 2, y1 = z.top + z.height / 2;
    token.style.left = `${x0}px`;
    token.style.top = `${y0}px`;
    $('flights').appendChild(token);
    const anim = token.animate(
      [{ transform: 'translate(-50%,-50%) scale(.8)', opacity: 0 }, { transform: 'translate(-50%,-50%) scale(1)', opacity: 1, offset: 0.15 },
        { transform: `translate(calc(-50% + ${x1 - x0}px), calc(-50% + ${y1 - y0}px)) scale(1)`, opacity: 1, offset: 0.85 },
        { transform: `translate(calc(-50% + ${x1 - x0}px), calc(-50% + ${y1 - y0}px)) scale(.8)`, opacity: 0 }],
      { duration: dur, delay: i * 120, easing: 'ease-in-out', fill: 'both' },
    );
    anim.onfinish = () => token.remove();
    const target = document.querySelector(`[data-k="${f.to}"]`);
    if (target) setTimeout(() => { target.classList.remove('flash'); void target.offsetWidth; target.classList.add('flash'); }, dur + i * 120 - 100);
  });
}

// ---- presets -------------------------------------------------------------------------------

function at(delay, run) {
  page.script.push({ at: b.now + delay, run });
  page.script.sort((x, y) => x.at - y.at);
}

const PRESETS = {
  happy: () => {
    reset(DEFAULT_CONFIG);
    actions.setChecker('commit');
    $('body').value = 'order #1001: pay 42 EUR';
    const txn = actions.begin();
    line('P', 'P', 'local transaction: debit the account… (takes 1.5 s)');
    at(1500, () => txn && actions.end(txn, 'commit'));
    play(true, 1);
  },
  crash: () => {
    reset(DEFAULT_CONFIG);
    actions.setChecker('commit');
    $('body').value = 'order #2001: pay 99 EUR';
    const txn = actions.begin();
    at(800, () => txn && actions.crash(txn));
    play(true, 2);
  },
  checkmax: () => {
    reset({ ...DEFAULT_CONFIG, transaction_timeout_ms: 3000, transaction_check_interval_ms: 3000, transaction_check_max: 3 });
    actions.setChecker('unknown');
    $('body').value = 'order #3001: stuck';
    const txn = actions.begin();
    at(500, () => txn && actions.crash(txn));
    play(true, 2);
  },
  delays: () => {
    reset(DEFAULT_CONFIG);
    $('topic').value = 'Reminders';
    for (const level of [1, 2, 3]) {
      $('body').value = `reminder L${level}`;
      $('delay-level').value = String(level);
      actions.sendDelayed();
    }
    $('body').value = 'reminder at 7.5 s';
    $('deliver-in').value = '7500';
    actions.sendAt();
    $('topic').value = 'Orders';
    play(true, 1);
  },
};

// ---- wiring --------------------------------------------------------------------------------

function reset(config) {
  const cfg = config ?? JSON.parse($('config').value);
  b = new Broker(cfg);
  $('config').value = JSON.stringify(cfg, null, 1);
  page.crashed.clear();
  page.script = [];
  page.timeline = [];
  page.flights = [];
  page.selected = null;
  play(false);
  fillDelayLevels();
  b.setProducerOnline(GROUP, page.checker !== 'offline');
  line('B', 'B', `new broker: transaction timeout ${short(b.config().transaction_timeout_ms)}, check interval ${short(b.config().transaction_check_interval_ms)}, check max ${b.config().transaction_check_max}`);
  settle();
}

function fillDelayLevels() {
  const levels = b.config().delay_levels;
  const sel = $('delay-level');
  const keep = sel.value || '2';
  sel.innerHTML = levels.map((ms, i) => `<option value="${i + 1}">level ${i + 1} · ${short(ms)}</option>`).join('');
  sel.value = Number(keep) <= levels.length ? keep : '1';
}

function play(on, speed) {
  page.playing = on;
  if (speed) {
    page.speed = speed;
    $('speed').value = String(speed);
  }
  $('play').innerHTML = on ? `${ICON.pause} Pause` : `${ICON.play} Play`;
  $('play').classList.toggle('on', on);
  page.lastFrame = performance.now();
}

function frame(t) {
  if (page.playing) {
    const dt = Math.min(250, t - page.lastFrame);
    advance(b.now + Math.round(dt * page.speed));
    if (dirty) render();
  }
  page.lastFrame = t;
  updateClock();
  requestAnimationFrame(frame);
}

function wire() {
  $('play').onclick = () => play(!page.playing);
  $('speed').onchange = (e) => (page.speed = Number(e.target.value));
  $('step').onclick = () => step();
  $('reset').onclick = () => reset();
  $('send-normal').onclick = () => actions.send();
  $('send-batch').onclick = () => actions.sendBatch();
  $('send-delayed').onclick = () => actions.sendDelayed();
  $('send-at').onclick = () => actions.sendAt();
  $('begin-txn').onclick = () => actions.begin();
  $('checker').onchange = (e) => actions.setChecker(e.target.value);
  $('pull-now').onclick = () => { actions.consume(true); settle(); };
  $('auto-consume').onchange = () => settle();
  for (const btn of document.querySelectorAll('[data-preset]')) btn.onclick = () => PRESETS[btn.dataset.preset]();
  document.body.addEventListener('click', (e) => {
    const end = e.target.closest('[data-end]');
    if (end) return actions.end(end.dataset.txn, end.dataset.end);
    const crash = e.target.closest('[data-crash]');
    if (crash) return actions.crash(crash.dataset.crash);
    const rec = e.target.closest('[data-rec]');
    if (rec && !e.target.closest('button')) {
      page.selected = Number(rec.dataset.rec);
      render();
    }
    return undefined;
  });
}

try {
  await init();
  T = systemTopics();
  wire();
  reset(DEFAULT_CONFIG);
  requestAnimationFrame(frame);
  document.body.dataset.ready = 'ok';
} catch (e) {
  document.body.dataset.ready = 'error';
  document.body.insertAdjacentHTML('afterbegin', `<pre class="fatal">${esc(e?.stack ?? e)}</pre>`);
  throw e;
}
