// Runs one scenario vector (tests/vectors/README.md) through the wasm binding's public API.
// The binding has no checker of its own: like a host, this runner answers every check at once
// with the group's current checker answer, stepping the clock event by event.

/** Normalized result of a step that threw a RockletError: {error: CODE}. */
function caught(e) {
  if (e && e.name === 'RockletError' && typeof e.code === 'string') return { error: e.code };
  throw e;
}

/** snake_case message fields of a vector -> the binding's message object. */
function message(s, topic = s.topic, queueId = s.queue_id) {
  const m = { topic, body: s.body };
  if (s.tag !== undefined) m.tag = s.tag;
  if (s.keys !== undefined) m.keys = s.keys;
  if (s.properties !== undefined) m.properties = s.properties;
  if (queueId !== undefined) m.queueId = queueId;
  if (s.delay_level !== undefined) m.delayLevel = s.delay_level;
  if (s.deliver_at_ms !== undefined) m.deliverAtMs = s.deliver_at_ms;
  return m;
}

export function runScenario(wasm, scenario, { onStep } = {}) {
  let b = new wasm.Broker(scenario.config ?? {});
  const answers = new Map(); // group -> 'commit' | 'rollback' | 'unknown' (online groups)
  const txns = new Map(); // label -> txn id
  const labelOf = new Map(); // txn id -> label
  const handles = new Map(); // label -> [handle]
  let checks = [];

  const drain = () => {
    for (const out of b.drain()) {
      if (out.type !== 'check') continue;
      checks.push({ group: out.group, txn: labelOf.get(out.txn) ?? out.txn, check: out.check, at: b.now });
      const answer = answers.get(out.group);
      if (answer === undefined) throw new Error(`check for offline group ${out.group}`);
      try {
        b.end(out.txn, answer, { fromCheck: true });
      } catch (e) {
        caught(e); // a refused answer changes nothing, as for any producer
      }
    }
  };
  const advance = (at) => {
    drain();
    for (let guard = 0; ; guard++) {
      if (guard > 1_000_000) throw new Error('clock does not advance');
      const t = b.nextEventAt();
      if (t === undefined || t > at) break;
      b.stepToNextEvent();
      drain();
    }
    b.advanceTo(at);
    drain();
  };
  const handle = (ref) => {
    const m = /^(.*)\[(\d+)\]$/.exec(ref);
    const list = m && handles.get(m[1]);
    return list?.[Number(m[2])] ?? ref;
  };
  const consume = (s) => {
    const group = s.group ?? 'vector-reader';
    const tags = s.tags ?? '*';
    const topic = b.topics().find((t) => t.name === s.topic);
    if (!topic) {
      // Not a consumer-visible topic (yet): one pull validates the name and returns nothing.
      try {
        const r = b.pull({ group, topic: s.topic, queueId: 0, offset: 0, tags });
        return { bodies: r.messages.map((m) => m.body) };
      } catch (e) {
        // A topic that does not exist reads as no messages in a vector (README).
        if (e.code === 'UNKNOWN_TOPIC') return { bodies: [] };
        throw e;
      }
    }
    const bodies = [];
    for (const q of topic.queues) {
      let offset = 0;
      for (;;) {
        const r = b.pull({ group, topic: s.topic, queueId: q.queueId, offset, max: 32, tags, autoCommit: false });
        bodies.push(...r.messages.map((m) => m.body));
        if (r.nextOffset <= offset || r.nextOffset >= r.maxOffset) break;
        offset = r.nextOffset;
      }
    }
    return { bodies };
  };

  const ops = {
    send: (s) => (b.send(message(s)), { ok: true }),
    send_batch: (s) => {
      const rs = b.sendBatch(s.messages.map((m) => message(m, m.topic ?? s.topic, s.queue_id)));
      return { ok: true, count: rs.length };
    },
    prepare: (s) => {
      const r = b.prepare(s.group, message(s));
      if (s.as !== undefined) {
        txns.set(s.as, r.txn);
        labelOf.set(r.txn, s.as);
      }
      return { ok: true };
    },
    end: (s) => {
      const r = b.end(txns.get(s.txn) ?? s.txn, s.resolution);
      return { ok: true, duplicate: r.duplicate };
    },
    declare_group: (s) => {
      b.declareGroup(s.group, s.fifo ?? false);
      return { ok: true };
    },
    checker: (s) => {
      if (s.answer === null) answers.delete(s.group);
      else answers.set(s.group, s.answer);
      b.setProducerOnline(s.group, s.answer !== null);
      return undefined;
    },
    advance: () => undefined,
    checks: () => {
      const out = { checks: checks };
      checks = [];
      return out;
    },
    consume,
    pull: (s) => {
      const r = b.pull({ group: s.group, topic: s.topic, queueId: s.queue_id, max: s.max ?? 32, tags: s.tags ?? '*', autoCommit: true });
      return { bodies: r.messages.map((m) => m.body), next_offset: r.nextOffset };
    },
    receive: (s) => {
      const args = { group: s.group, topic: s.topic, max: s.max, invisibleMs: s.invisible_ms };
      if (s.tags !== undefined) args.tags = s.tags;
      const rs = b.receive(args);
      if (s.as !== undefined) handles.set(s.as, rs.map((r) => r.handle));
      return { bodies: rs.map((r) => r.message.body), attempts: rs.map((r) => r.attempt) };
    },
    ack: (s) => (b.ack(s.group, handle(s.handle)), { ok: true }),
    change_invisible: (s) => {
      const r = b.changeInvisible(s.group, handle(s.handle), s.invisible_ms);
      const m = /^(.*)\[(\d+)\]$/.exec(s.handle);
      if (m && handles.has(m[1])) handles.get(m[1])[Number(m[2])] = r.handle;
      return { ok: true };
    },
    pending: () => ({ transactions: b.pendingTransactionCount(), delays: b.pendingDelayCount() }),
    reopen: () => {
      b.reopen();
      for (const g of answers.keys()) b.setProducerOnline(g, true); // checkers stay registered
      return undefined;
    },
  };

  let at = 0;
  scenario.steps.forEach((step, i) => {
    at = step.at ?? at;
    advance(at);
    const op = ops[step.op];
    if (!op) throw new Error(`step ${i}: unknown op ${step.op}`);
    let result;
    try {
      result = op(step);
    } catch (e) {
      result = caught(e);
    }
    drain();
    onStep?.(i, step, result);
  });
  return b;
}
