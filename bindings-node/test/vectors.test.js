'use strict';
// Runs every shared scenario vector (tests/vectors/scenarios/*.json, format in
// tests/vectors/README.md) through the public API and compares each step's normalized
// result with its `expect`. Every vector runs in memory (unless it reopens) and durable.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Broker, RockletError } = require('..');

const DIR = path.join(__dirname, '..', '..', 'tests', 'vectors', 'scenarios');
const files = fs.existsSync(DIR) ? fs.readdirSync(DIR).filter((f) => f.endsWith('.json')).sort() : [];

const camel = (s) => s.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

function options(step) {
  const o = {};
  if (step.tag !== undefined) o.tag = step.tag;
  if (step.keys !== undefined) o.keys = step.keys;
  if (step.properties !== undefined) o.properties = step.properties;
  if (step.queue_id !== undefined) o.queueId = step.queue_id;
  if (step.delay_level !== undefined) o.delayLevel = step.delay_level;
  if (step.deliver_at_ms !== undefined) o.deliverAt = step.deliver_at_ms;
  return o;
}

function handleOf(handles, ref) {
  const m = /^(.*)\[(\d+)\]$/.exec(ref);
  assert.ok(m, `handle reference ${ref}`);
  const list = handles.get(m[1]);
  assert.ok(list, `no receive labelled ${m[1]}`);
  return { label: m[1], index: Number(m[2]), handle: list[Number(m[2])] };
}

async function run(vector, dir) {
  const config = {};
  for (const [k, v] of Object.entries(vector.config ?? {})) config[camel(k)] = v;
  const open = (now) => new Broker({ ...config, clock: 'manual', now, ...(dir ? { path: dir } : {}) });
  let broker = open(0);
  const txns = new Map(); // label -> txn id
  const labelOf = (id) => [...txns].find(([, t]) => t === id)?.[0] ?? id;
  const answers = new Map(); // group -> answer
  const handles = new Map();
  let checks = [];
  const register = (group) =>
    broker.setChecker(group, (c) => {
      checks.push({ group: c.group, txn: labelOf(c.txn), check: c.check, at: c.at });
      return answers.get(c.group);
    });
  try {
    for (const [i, step] of vector.steps.entries()) {
      // Advance to the step's time (the same time too: what came due there fires first).
      await broker.advanceTo(step.at ?? broker.now);
      let result;
      try {
        result = await apply(step);
      } catch (err) {
        if (!(err instanceof RockletError)) throw err;
        result = { error: err.code };
      }
      if ('expect' in step) {
        assert.deepStrictEqual(result, step.expect, `step ${i} (${step.op}) of ${vector.name}`);
      }
    }
  } finally {
    broker.close();
  }

  async function apply(step) {
    const b = broker;
    switch (step.op) {
      case 'send':
        b.send(step.topic, step.body, options(step));
        return { ok: true };
      case 'send_batch': {
        const msgs = step.messages.map((m) => ({ body: m.body, ...(m.topic ? { topic: m.topic } : {}), ...options(m) }));
        const r = b.sendBatch(step.topic, msgs, step.queue_id !== undefined ? { queueId: step.queue_id } : undefined);
        return { ok: true, count: r.length };
      }
      case 'prepare': {
        const r = b.prepare(step.group, { topic: step.topic, body: step.body, ...options(step) });
        if (step.as) txns.set(step.as, r.txn);
        return { ok: true };
      }
      case 'end': {
        const r = b.endTransaction(txns.get(step.txn) ?? step.txn, step.resolution);
        return { ok: true, duplicate: r.duplicate };
      }
      case 'declare_group':
        b.declareGroup(step.group, step.fifo ?? false);
        return { ok: true };
      case 'checker':
        if (step.answer === null) {
          answers.delete(step.group);
          b.removeChecker(step.group);
        } else {
          answers.set(step.group, step.answer);
          register(step.group);
        }
        return undefined;
      case 'advance':
        return undefined;
      case 'checks': {
        const out = checks;
        checks = [];
        return { checks: out };
      }
      case 'consume': {
        const group = step.group ?? 'vector-reader';
        const topic = b.topics().find((t) => t.name === step.topic);
        // A topic the broker does not list still goes through pull once: it validates the name.
        const queues = topic ? [...topic.queues].sort((x, y) => x.queueId - y.queueId) : [{ queueId: 0 }];
        const bodies = [];
        for (const q of queues) {
          let offset = 0;
          for (;;) {
            const opts = { offset, autoCommit: false };
            if (step.tags !== undefined) opts.tags = step.tags;
            let r;
            try {
              r = b.pull(group, step.topic, q.queueId, opts);
            } catch (e) {
              // A topic that does not exist reads as no messages in a vector (README).
              if (!topic && e.code === 'UNKNOWN_TOPIC') break;
              throw e;
            }
            for (const m of r.messages) bodies.push(m.body.toString('utf8'));
            if (r.nextOffset === offset || r.nextOffset >= r.maxOffset) break;
            offset = r.nextOffset;
          }
        }
        return { bodies };
      }
      case 'pull': {
        const opts = { max: step.max ?? 32 };
        if (step.tags !== undefined) opts.tags = step.tags;
        const r = b.pull(step.group, step.topic, step.queue_id, opts);
        return { bodies: r.messages.map((m) => m.body.toString('utf8')), next_offset: r.nextOffset };
      }
      case 'receive': {
        const r = b.receive(step.group, step.topic, { max: step.max, invisibleMs: step.invisible_ms });
        if (step.as) handles.set(step.as, r.map((m) => m.handle));
        return { bodies: r.map((m) => m.body.toString('utf8')), attempts: r.map((m) => m.attempt) };
      }
      case 'ack':
        b.ack(step.group, handleOf(handles, step.handle).handle);
        return { ok: true };
      case 'change_invisible': {
        const h = handleOf(handles, step.handle);
        const r = b.changeInvisible(step.group, h.handle, step.invisible_ms);
        handles.get(h.label)[h.index] = r.handle;
        return { ok: true };
      }
      case 'pending':
        return { transactions: b.pendingTransactions().length, delays: b.pendingDelays().length };
      case 'reopen': {
        assert.ok(dir, 'reopen runs durable only');
        const now = b.now;
        b.close();
        broker = open(now);
        for (const g of answers.keys()) register(g);
        return undefined;
      }
      default:
        throw new Error(`unknown op ${step.op}`);
    }
  }
}

test('the shared scenario vectors are present', () => {
  assert.ok(files.length > 0, `no vectors in ${DIR}`);
});

for (const file of files) {
  const vector = JSON.parse(fs.readFileSync(path.join(DIR, file), 'utf8'));
  const reopens = vector.steps.some((s) => s.op === 'reopen');
  if (!reopens) {
    test(`vector ${vector.name} (memory)`, () => run(vector, null));
  }
  test(`vector ${vector.name} (durable)`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rocklet-vec-'));
    try {
      await run(vector, dir);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}
