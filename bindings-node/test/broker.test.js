'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const {
  Broker, RockletError, ClientError, ConfigError, StorageError, StateError,
} = require('..');

const tmp = () => fs.mkdtempSync(path.join(os.tmpdir(), 'rocklet-node-'));
const bodies = (list) => list.map((m) => m.body.toString());
const manual = (extra) => new Broker({ clock: 'manual', ...extra });
const code = (fn, cls, c, re) => assert.throws(fn, (e) => {
  assert.ok(e instanceof RockletError && e instanceof cls, `${e}`);
  assert.equal(e.code, c);
  if (re) assert.match(e.message, re);
  return true;
});

// ---- durable -------------------------------------------------------------------------------

test('a durable broker reopened keeps pending transactions, delays and offsets', async () => {
  const dir = tmp();
  try {
    let b = new Broker({ path: dir, clock: 'manual', flush: 'sync' });
    const t = b.prepare('PG', { topic: 'T', body: 'half', keys: ['k'] });
    b.send('T', 'later', { delayLevel: 2, queueId: 0 }); // 5 s
    b.send('T', 'now', { queueId: 0 });
    assert.deepEqual(bodies(b.pull('G', 'T', 0).messages), ['now']);
    b.close();
    assert.equal(b.closed, true);
    assert.throws(() => b.send('T', 'x'), (e) => e instanceof StateError && e.code === 'BROKER_CLOSED');

    b = new Broker({ path: dir, clock: 'manual' });
    assert.ok(b.recoveryReport().records > 0);
    assert.deepEqual(b.pendingTransactions().map((p) => p.txn), [t.txn]);
    assert.equal(b.pendingDelays().length, 1);
    assert.equal(b.committedOffset('G', 'T', 0), 1);
    const seen = [];
    b.setChecker('PG', async (c) => {
      seen.push([c.txn, c.check, c.at, c.message.body.toString(), c.message.keys]);
      return 'commit';
    });
    await b.advance(6000);
    assert.deepEqual(seen, [[t.txn, 1, 6000, 'half', ['k']]]);
    assert.deepEqual(b.pendingTransactions(), []);
    const all = b.topics().find((x) => x.name === 'T').queues.flatMap((q) => bodies(b.pull('G2', 'T', q.queueId).messages));
    assert.deepEqual(all.sort(), ['half', 'later', 'now']);
    b.close();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('pull reads every queue unless a queue is given (the README example)', () => {
  const b = manual({ defaultQueues: 4 });
  try {
    b.send('orders', 'q1', { queueId: 1 });
    b.send('orders', 'q3', { queueId: 3 });
    // One queue: that queue only, with its offsets.
    const one = b.pull('billing', 'orders', 3);
    assert.deepEqual(bodies(one.messages), ['q3']);
    assert.equal(one.nextOffset, 1);
    assert.deepEqual(one.queues.map((q) => q.queueId), [3]);
    // No queue (or null, or options third): every queue, in order.
    const all = b.pull('billing', 'orders');
    assert.deepEqual(bodies(all.messages), ['q1']);
    assert.equal(all.nextOffset, undefined);
    assert.deepEqual(all.queues.map((q) => [q.queueId, q.nextOffset]), [[0, 0], [1, 1], [2, 0], [3, 1]]);
    b.send('orders', 'q0', { queueId: 0 });
    b.send('orders', 'q2', { queueId: 2 });
    assert.deepEqual(bodies(b.pull('G2', 'orders', null, { autoCommit: false }).messages), ['q0', 'q1', 'q2', 'q3']);
    assert.deepEqual(bodies(b.pull('G2', 'orders', { max: 3 }).messages), ['q0', 'q1', 'q2']);
    assert.deepEqual(bodies(b.pull('G2', 'orders', { max: 3 }).messages), ['q3']);
    code(() => b.pull('G', 'orders', { offset: 0 }), ClientError, 'INVALID_ARGUMENT', /offset needs a queue/);
  } finally {
    b.close();
  }
});

test('now is a getter, as clock, closed and failed (and as in Python and wasm)', async () => {
  const b = manual({ now: 1000 });
  try {
    assert.equal(typeof b.now, 'number');
    assert.equal(b.now, 1000);
    await b.advance(250);
    assert.equal(b.now, 1250);
  } finally {
    b.close();
  }
});

test('pull and receive on a topic that does not exist throw UNKNOWN_TOPIC', () => {
  const b = manual();
  try {
    b.send('orders', 'x');
    code(() => b.pull('G', 'ordres'), ClientError, 'UNKNOWN_TOPIC', /ordres/);
    code(() => b.pull('G', 'ordres', 0), ClientError, 'UNKNOWN_TOPIC', /ordres/);
    code(() => b.receive('G', 'ordres', { invisibleMs: 1000 }), ClientError, 'UNKNOWN_TOPIC', /ordres/);
    assert.equal(b.topics().find((t) => t.name === 'ordres'), undefined);
  } finally {
    b.close();
  }
});

test('a data directory is held by one open broker at a time', () => {
  const dir = tmp();
  try {
    const a = new Broker({ path: dir });
    assert.throws(() => new Broker({ path: dir }), (e) => e instanceof StorageError && e.code === 'STORAGE' && /in use/.test(e.message));
    a.close();
    new Broker({ path: dir }).close();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// ---- checkers ------------------------------------------------------------------------------

test('async checkers are awaited by advance, in check order', async () => {
  const b = manual({ transactionTimeoutMs: 1000, transactionCheckIntervalMs: 1000 });
  const log = [];
  b.setChecker('PG', async (c) => {
    await new Promise((r) => setTimeout(r, 5));
    log.push(`${c.message.body}#${c.check}@${c.at}`);
    return c.check < 2 ? 'unknown' : c.message.body.toString() === 'a' ? 'commit' : 'rollback';
  });
  b.prepare('PG', { topic: 'T', body: 'a' });
  await b.advance(500);
  b.prepare('PG', { topic: 'T', body: 'b' });
  await b.advance(10_000);
  assert.deepEqual(log, ['a#1@1000', 'b#1@1500', 'a#2@2000', 'b#2@2500']);
  assert.deepEqual(bodies(b.receive('C', 'T', { invisibleMs: 1000 })), ['a']);
  assert.equal(b.stats().unknownAnswers, 2);
});

test('a checker that throws leaves the transaction pending and reports the error', async () => {
  const b = manual();
  const errors = [];
  b.on('checkerError', (err, check) => errors.push([err.message, check.check]));
  let fail = true;
  b.setChecker('PG', async () => {
    if (fail) throw new Error('db down');
    return 'commit';
  });
  const t = b.prepare('PG', { topic: 'T', body: 'x' });
  await b.advance(6000);
  assert.deepEqual(errors, [['db down', 1]]);
  assert.equal(b.pendingTransactions()[0].txn, t.txn);
  assert.equal(b.pendingTransactions()[0].checks, 1);
  fail = false;
  await b.advance(30_000);
  assert.deepEqual(b.pendingTransactions(), []);
  assert.deepEqual(bodies(b.receive('C', 'T', { invisibleMs: 1000 })), ['x']);
});

test('a checker answering nonsense is an error, the transaction stays pending', async () => {
  const b = manual();
  const errors = [];
  b.on('checkerError', (err) => errors.push(err.code));
  b.setChecker('PG', () => 'maybe');
  b.prepare('PG', { topic: 'T', body: 'x' });
  await b.advance(6000);
  assert.deepEqual(errors, ['INVALID_ARGUMENT']);
  assert.equal(b.pendingTransactions().length, 1);
});

test('without a checker the check is parked; setChecker brings it out', async () => {
  const b = manual({ trace: true });
  b.prepare('PG', { topic: 'T', body: 'x' });
  await b.advance(100_000);
  assert.equal(b.pendingTransactions()[0].nextCheck, undefined);
  b.setChecker('PG', () => 'rollback');
  await b.advance(0);
  assert.deepEqual(b.pendingTransactions(), []);
  assert.deepEqual(b.takeTrace().map((e) => e.kind), ['half_stored', 'check_parked', 'check_sent', 'rolled_back']);
});

// ---- producers ------------------------------------------------------------------------------

test('several concurrent async producers: each transaction ends as its callback did', async () => {
  const b = manual();
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const producer = async (p) => {
    const out = [];
    for (let i = 0; i < 20; i++) {
      const body = `p${p}-${i}`;
      try {
        await b.transaction('PG', { topic: 'T', body, keys: [body] }, async (tx) => {
          assert.match(tx.txn, /^[0-9A-F]{16}$/);
          await sleep((i * 7 + p * 3) % 4);
          if (i % 3 === 0) throw new Error('nope');
        });
        out.push(body);
      } catch (e) {
        assert.equal(e.message, 'nope');
      }
      if (i % 2) b.send('T', `plain-${body}`);
    }
    return out;
  };
  const committed = (await Promise.all([0, 1, 2, 3, 4].map(producer))).flat();
  assert.equal(committed.length, 5 * 13);
  assert.deepEqual(b.pendingTransactions(), []);
  const seen = bodies(b.receive('C', 'T', { invisibleMs: 1000 })).filter((x) => !x.startsWith('plain-'));
  assert.deepEqual(seen.sort(), committed.sort());
  const s = b.stats();
  assert.equal(s.committed, 65);
  assert.equal(s.rolledBack, 35);
});

test('send, batch, delays by level, deliverAt and delayMs', async () => {
  const b = manual({ defaultQueues: 1, delayLevels: [1000, 2000] });
  const r = b.send('T', Buffer.from([0, 1, 2]), { tag: 'a', keys: 'k1', properties: { color: 'red' } });
  assert.equal(r.queueOffset, 0);
  const batch = b.sendBatch('T', ['x', Buffer.from('y'), { body: new Uint8Array([122]), tag: 'z' }]);
  assert.deepEqual(batch.map((x) => x.queueOffset), [1, 2, 3]);
  b.send('T', 'level2', { delayLevel: 2 });
  b.send('T', 'at1500', { deliverAt: 1500 });
  b.send('T', 'in500', { delayMs: 500 });
  b.send('T', 'atMs1500', { deliverAtMs: 1500 }); // the name Python and wasm use
  assert.equal(b.pendingDelays().length, 4);
  const read = () => bodies(b.pull('G', 'T', 0).messages);
  const first = b.pull('G', 'T', 0).messages;
  assert.deepEqual(first[0].body, Buffer.from([0, 1, 2]));
  assert.equal(first[0].tag, 'a');
  assert.deepEqual(first[0].keys, ['k1']);
  assert.equal(first[0].properties.color, 'red');
  assert.deepEqual(bodies(first.slice(1)), ['x', 'y', 'z']);
  await b.advance(499);
  assert.deepEqual(read(), []);
  await b.advance(1);
  assert.deepEqual(read(), ['in500']);
  await b.advance(1000);
  assert.deepEqual(read(), ['at1500', 'atMs1500']);
  await b.advance(500);
  assert.deepEqual(read(), ['level2']);
});

// ---- consumers ------------------------------------------------------------------------------

test('receive, changeInvisible, ack and redelivery', async () => {
  const b = manual({ defaultQueues: 1 });
  b.send('T', 'm');
  const [m] = b.receive('G', 'T', { invisibleMs: 1000, max: 1 });
  assert.equal(m.attempt, 1);
  assert.equal(m.visibleAt, 1000);
  assert.equal(b.inflightCount('G', 'T'), 1);
  const changed = b.changeInvisible('G', m.handle, 5000);
  assert.equal(changed.visibleAt, 5000);
  assert.notEqual(changed.handle, m.handle);
  await b.advance(4999);
  assert.deepEqual(b.receive('G', 'T', { invisibleMs: 1000 }), []);
  await b.advance(1);
  const [again] = b.receive('G', 'T', { invisibleMs: 1000 });
  assert.equal(again.attempt, 2);
  // Handles of the earlier delivery, from before and after its renewal, are stale now.
  for (const h of [m.handle, changed.handle]) {
    assert.throws(() => b.ack('G', h), (e) => e instanceof ClientError && e.code === 'STALE_RECEIPT_HANDLE');
  }
  b.ack('G', again.handle);
  assert.equal(b.inflightCount('G', 'T'), 0);
  await b.runUntilIdle();
  assert.deepEqual(b.receive('G', 'T', { invisibleMs: 1000 }), []);
});

test('subscribe yields messages as they become visible and acks on the next one', async () => {
  const b = manual({ defaultQueues: 1 });
  const got = [];
  const done = (async () => {
    for await (const m of b.subscribe('G', 'T', { invisibleMs: 10_000 })) {
      got.push(`${m.body}#${m.attempt}`);
      if (m.body.toString() === 'boom' && m.attempt === 1) break; // leaves it un-acked
    }
  })();
  b.send('T', 'a');
  b.send('T', 'later', { delayMs: 1000 });
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(got, ['a#1']);
  await b.advance(1000);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(got, ['a#1', 'later#1']);
  b.send('T', 'boom');
  await done;
  assert.deepEqual(got, ['a#1', 'later#1', 'boom#1']);
  assert.equal(b.inflightCount('G', 'T'), 1); // boom, not acked
  await b.advance(10_000);
  const it = b.subscribe('G', 'T', { invisibleMs: 10_000 });
  const next = await it.next();
  assert.equal(`${next.value.body}#${next.value.attempt}`, 'boom#2');
  await it.return();
  b.close();
  assert.deepEqual(await it.next(), { done: true, value: undefined });
});

test('a waiting subscriber ends when the broker closes', async () => {
  const b = manual();
  const it = b.subscribe('G', 'T', { invisibleMs: 1000 });
  const p = it.next();
  b.close();
  assert.deepEqual(await p, { done: true, value: undefined });
});

test('system clock: a timer drives checks and delayed deliveries', async () => {
  const b = new Broker({ transactionTimeoutMs: 30, delayLevels: [20] });
  assert.equal(b.clock, 'system');
  b.setChecker('PG', async () => 'commit');
  // One queue: a receive reads queue by queue, so on a loaded machine (both visible by the
  // time the loop receives) two queues would give queue order, not time order.
  b.prepare('PG', { topic: 'T', body: 'txn', queueId: 0 });
  b.send('T', 'delayed', { delayLevel: 1, queueId: 0 });
  const got = [];
  for await (const m of b.subscribe('G', 'T', { invisibleMs: 60_000 })) {
    got.push(m.body.toString());
    if (got.length === 2) break;
  }
  assert.deepEqual(got, ['delayed', 'txn']);
  await assert.rejects(b.advance(1), (e) => e instanceof StateError && e.code === 'WRONG_CLOCK');
  b.close();
});

// ---- introspection ---------------------------------------------------------------------------

test('introspection: topics, consume queue, stats, config, trace', async () => {
  const b = manual({ trace: true, defaultQueues: 2 });
  b.send('T', 'x', { queueId: 1 });
  const t = b.prepare('PG', { topic: 'T', body: 'y', queueId: 0 });
  b.rollback(t.txn);
  assert.deepEqual(b.topics(), [{ name: 'T', queues: [{ queueId: 0, nextOffset: 0, visible: 0 }, { queueId: 1, nextOffset: 1, visible: 1 }] }]);
  assert.equal(b.consumeQueue('T', 1).length, 1);
  assert.equal(b.stats().rolledBack, 1);
  assert.equal(b.config().defaultQueues, 2);
  assert.equal(b.config().transactionTimeoutMs, 6000);
  assert.ok(b.logEnd() > 0);
  const trace = b.takeTrace();
  assert.deepEqual(trace.map((e) => [e.kind, e.topic]), [['stored', 'T'], ['half_stored', 'T'], ['rolled_back', 'T']]);
  assert.deepEqual(b.takeTrace(), []);
  const dup = b.endTransaction(t.txn, 'rollback');
  assert.equal(dup.duplicate, true);
});

// ---- bad input ------------------------------------------------------------------------------

test('bad input gives RockletError subclasses with a code', () => {
  const b = manual();
  code(() => b.send('', 'x'), ClientError, 'INVALID_TOPIC');
  code(() => b.send('T', ''), ClientError, 'EMPTY_BODY');
  code(() => b.send('T', 42), ClientError, 'INVALID_ARGUMENT', /body must be a Buffer/);
  code(() => b.send(7, 'x'), ClientError, 'INVALID_ARGUMENT', /topic must be a string/);
  code(() => b.send('T', 'x', { delayLevel: -1 }), ClientError, 'INVALID_ARGUMENT', /delayLevel/);
  code(() => b.send('T', 'x', { delayLevel: 1, deliverAt: 5 }), ClientError, 'INVALID_ARGUMENT', /at most one/);
  code(() => b.send('T', 'x', { deliverAtMs: 5, deliverAt: 5 }), ClientError, 'INVALID_ARGUMENT', /at most one/);
  code(() => b.send('T', 'x', { colour: 'red' }), ClientError, 'INVALID_ARGUMENT', /unknown option `colour`/);
  code(() => b.send('T', 'x', { properties: { a: 1 } }), ClientError, 'INVALID_ARGUMENT', /properties.a must be a string/);
  code(() => b.sendBatch('T', 'x'), ClientError, 'INVALID_ARGUMENT', /array/);
  code(() => b.sendBatch('T', []), ClientError, 'EMPTY_BATCH');
  code(() => b.prepare('PG', { body: 'x' }), ClientError, 'INVALID_ARGUMENT', /message.topic is required/);
  code(() => b.prepare('PG', { topic: 'T', body: 'x', delayLevel: 1 }), ClientError, 'DELAY_ON_TRANSACTION');
  code(() => b.commit('nope'), ClientError, 'MALFORMED_TRANSACTION_ID');
  code(() => b.commit('00000000000000FF'), ClientError, 'UNKNOWN_TRANSACTION');
  code(() => b.endTransaction('00000000000000FF', 'perhaps'), ClientError, 'INVALID_ARGUMENT', /resolution/);
  code(() => b.receive('G', 'T', { max: 1 }), ClientError, 'INVALID_ARGUMENT', /invisibleMs is required/);
  code(() => b.receive('G', 'T', { invisibleMs: 0 }), ClientError, 'INVALID_ARGUMENT');
  code(() => b.ack('G', 'garbage'), ClientError, 'INVALID_RECEIPT_HANDLE');
  code(() => b.pull('G', 'T', 1.5), ClientError, 'INVALID_ARGUMENT', /^invalid argument: queueId must be a whole number from 0 to 4294967295, not 1.5$/);
  code(() => b.subscribe('G', 'T'), ClientError, 'INVALID_ARGUMENT', /invisibleMs/);
  code(() => b.setChecker('PG', 'commit'), ClientError, 'INVALID_ARGUMENT');
  code(() => new Broker({ clock: 'sundial' }), ClientError, 'INVALID_ARGUMENT', /clock/);
  code(() => new Broker({ transactionTimoutMs: 5 }), ClientError, 'INVALID_ARGUMENT', /unknown option `transactionTimoutMs`/);
  code(() => new Broker({ now: 5 }), ClientError, 'INVALID_ARGUMENT', /manual/);
  code(() => new Broker({ defaultQueues: 0 }), ConfigError, 'INVALID_CONFIG', /defaultQueues/);
  code(() => new Broker({ flush: 'sometimes' }), ConfigError, 'INVALID_CONFIG', /flush/);
  code(() => new Broker('x'), ClientError, 'INVALID_ARGUMENT');
  code(() => b.stepClock(-1), ClientError, 'INVALID_ARGUMENT');
  code(() => new Broker().stepClock(1), StateError, 'WRONG_CLOCK');
  // Nothing was stored by any of it.
  assert.equal(b.logEnd(), 0);
  assert.equal(b.stats().clientErrors > 0, true);
});

test('advance rejects bad durations', async () => {
  const b = manual();
  await assert.rejects(b.advance(-1), (e) => e instanceof ClientError && e.code === 'INVALID_ARGUMENT');
  await assert.rejects(b.advance(1.5), (e) => e.code === 'INVALID_ARGUMENT');
});

test('no panic reaches JS: it becomes an INTERNAL error and closes the broker', () => {
  const b = manual();
  b.send('T', 'x');
  assert.throws(() => b.__panicForTest(), (e) => e instanceof RockletError && e.code === 'INTERNAL' && /panic/.test(e.message));
  assert.equal(b.closed, true);
  assert.throws(() => b.send('T', 'y'), (e) => e instanceof StateError && e.code === 'BROKER_CLOSED');
});

test('a failed sync stops the broker: FAILED for every call and a waiting subscriber, reopening recovers', { timeout: 10_000 }, async () => {
  const dir = tmp();
  try {
    const b = new Broker({ path: dir, clock: 'manual', flush: 'sync', defaultQueues: 1 });
    b.send('T', 'durable');
    const sub = b.subscribe('G', 'T', { invisibleMs: 60_000 });
    assert.equal((await sub.next()).value.body.toString(), 'durable');
    const waiting = sub.next(); // acks it, then waits for more
    assert.equal(b.failed, null);
    // What the core is told when a host's fsync fails (no fsync can be made to fail here).
    b.__failSyncForTest('disk gone');
    assert.equal(b.failed, 'disk gone');
    const failed = (e) => e instanceof StateError && e.code === 'FAILED'
      && /failed sync \(disk gone\)/.test(e.message) && /open its path again/.test(e.message);
    await assert.rejects(waiting, failed);
    assert.throws(() => b.send('T', 'lost'), failed);
    assert.throws(() => b.prepare('PG', { topic: 'T', body: 'half' }), failed);
    assert.throws(() => b.receive('G', 'T', { invisibleMs: 1000 }), failed);
    assert.throws(() => b.createTopic('U', 1), failed);
    assert.throws(() => b.sync(), failed);
    await assert.rejects(b.advance(1000), failed);
    b.close(); // nothing to sync: it just closes
    assert.equal(b.closed, true);
    const again = new Broker({ path: dir, clock: 'manual' });
    assert.equal(again.failed, null);
    assert.deepEqual(bodies(again.pull('G2', 'T', 0).messages), ['durable']);
    again.close();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('commitOffset, sendBack and forwardToDeadLetter', async () => {
  const b = manual({ defaultQueues: 1, delayLevels: [1000, 2000, 3000] });
  b.send('T', 'a');
  b.send('T', 'b');
  b.commitOffset('G', 'T', 0, 1);
  assert.equal(b.committedOffset('G', 'T', 0), 1);
  const [m] = b.pull('G', 'T', 0).messages;
  assert.equal(m.body.toString(), 'b');
  const back = b.sendBack('G', m.offset, { delayLevel: 1 });
  assert.equal(back.topic, '%RETRY%G');
  await b.advance(1000);
  const [retry] = b.pull('G', '%RETRY%G', 0).messages;
  assert.equal(retry.body.toString(), 'b');
  assert.equal(retry.reconsumeTimes, 1);
  const [r] = b.receive('H', 'T', { invisibleMs: 1000, max: 1 });
  b.forwardToDeadLetter('H', r.handle);
  assert.deepEqual(bodies(b.pull('x', '%DLQ%H', 0).messages), ['a']);
});
