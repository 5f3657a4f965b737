// node --test bindings-wasm/tests/binding.test.mjs   (PKG_NODE = dir of the nodejs glue)
// The binding's own contract: conversions, errors, the manual clock, introspection.
import test from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const w = require(path.resolve(process.env.PKG_NODE ?? path.join(root, 'target/wasm-pkg/node'), 'rocklet_wasm.js'));
const { Broker } = w;

const code = (fn) => {
  try {
    fn();
  } catch (e) {
    assert.equal(e.name, 'RockletError');
    assert.ok(e instanceof Error);
    assert.ok(e.message.length > 0);
    return e.code;
  }
  assert.fail('did not throw');
};

test('config: object, JSON string, defaults, and refusals', () => {
  assert.equal(new Broker().config().transaction_timeout_ms, 6000);
  assert.equal(new Broker('{"transaction_timeout_ms": 1234}').config().transaction_timeout_ms, 1234);
  assert.equal(new Broker({ flush: 'sync' }).config().flush, 'sync');
  assert.equal(code(() => new Broker({ transaction_timeout: 5 })), 'INVALID_CONFIG'); // misspelt
  assert.equal(code(() => new Broker('{not json')), 'INVALID_CONFIG');
  assert.equal(code(() => new Broker({ default_queues: 0 })), 'INVALID_CONFIG'); // core validation
  assert.equal(new Broker({}, 5000).now, 5000);
});

test('client mistakes throw with the core code; bad JS values with INVALID_ARGUMENT', () => {
  const b = new Broker();
  assert.equal(code(() => b.send({ topic: 'T', body: '' })), 'EMPTY_BODY');
  assert.equal(code(() => b.end('xyz', 'commit')), 'MALFORMED_TRANSACTION_ID');
  assert.equal(code(() => b.end('00000000000000FF', 'commit')), 'UNKNOWN_TRANSACTION');
  assert.equal(code(() => b.end('00000000000000FF', 'maybe')), 'INVALID_ARGUMENT');
  assert.equal(code(() => b.send({ topic: 'T', body: 'x', delayLevl: 2 })), 'INVALID_ARGUMENT');
  assert.equal(code(() => b.send({ topic: 'T', body: 'x', delayLevel: 1, deliverAtMs: 5 })), 'INVALID_ARGUMENT');
  assert.equal(code(() => b.send({ topic: 'T', body: 42 })), 'INVALID_ARGUMENT');
  assert.equal(code(() => b.sendBatch({ topic: 'T', body: 'x' })), 'INVALID_ARGUMENT');
  assert.equal(code(() => b.advanceTo(-1)), 'INVALID_ARGUMENT');
  assert.equal(code(() => b.ack('G', 'nonsense')), 'INVALID_RECEIPT_HANDLE');
  assert.equal(b.stats().clientErrors, 2); // the core saw only EMPTY_BODY and UNKNOWN_TRANSACTION
});

test('bodies: strings are UTF-8, Uint8Array is taken as is', () => {
  const b = new Broker({ default_queues: 1 });
  b.send({ topic: 'T', body: 'héllo' });
  b.send({ topic: 'T', body: new Uint8Array([0, 255, 1]) });
  const { messages } = b.pull({ group: 'G', topic: 'T', queueId: 0, offset: 0 });
  assert.deepEqual([...messages[0].bodyBytes], [...Buffer.from('héllo')]);
  assert.equal(messages[0].body, 'héllo');
  assert.deepEqual([...messages[1].bodyBytes], [0, 255, 1]);
});

test('transaction: half message invisible, check at transaction_timeout_ms, answer commits once', () => {
  const b = new Broker({ trace: true, default_queues: 1, transaction_timeout_ms: 6000 });
  b.setProducerOnline('PG', true);
  const sent = b.prepare('PG', { topic: 'Orders', body: 'order-1', tag: 'paid', keys: ['o1'], properties: { a: 'b' } });
  assert.match(sent.txn, /^[0-9A-F]{16}$/);
  const pullAll = () => b.pull({ group: 'C', topic: 'Orders', queueId: 0, offset: 0 }).messages.map((m) => m.body);
  assert.deepEqual(pullAll(), []);
  const [pending] = b.pendingTransactions();
  assert.deepEqual(
    { txn: pending.txn, group: pending.group, topic: pending.topic, checks: pending.checks, nextCheck: pending.nextCheck },
    { txn: sent.txn, group: 'PG', topic: 'Orders', checks: 0, nextCheck: 6000 },
  );
  assert.deepEqual(b.drain().map((o) => `${o.type}:${o.kind}`), ['trace:half_stored']);

  assert.equal(b.nextEventAt(), 6000);
  assert.equal(b.stepToNextEvent(), 6000);
  assert.equal(b.now, 6000);
  const outs = b.drain();
  const check = outs.find((o) => o.type === 'check');
  assert.equal(check.txn, sent.txn);
  assert.equal(check.group, 'PG');
  assert.equal(check.check, 1);
  assert.equal(check.message.body, 'order-1');
  assert.equal(check.message.properties.a, 'b');
  assert.ok(outs.some((o) => o.type === 'trace' && o.kind === 'check_sent'));
  assert.deepEqual(pullAll(), []);

  assert.deepEqual(b.end(check.txn, 'commit', { fromCheck: true }), { txn: sent.txn, resolution: 'commit', duplicate: false });
  assert.deepEqual(pullAll(), ['order-1']);
  assert.deepEqual(b.end(sent.txn, 'commit'), { txn: sent.txn, resolution: 'commit', duplicate: true });
  assert.deepEqual(pullAll(), ['order-1']);
  assert.deepEqual(b.pendingTransactions(), []);
  // The core may still report the resolved transaction's old deadline (removal is lazy):
  // stepping there does nothing, and then nothing is scheduled.
  while (b.nextEventAt() !== undefined) b.stepToNextEvent();
  assert.deepEqual(b.drain().filter((o) => o.type === 'check'), []);
  assert.equal(b.stepToNextEvent(), undefined);
});

test('offline producer: the check waits (nextCheck null) and goes out when it is online', () => {
  const b = new Broker({ transaction_timeout_ms: 1000 });
  const { txn } = b.prepare('PG', { topic: 'T', body: 'x' });
  b.advanceTo(50_000);
  assert.deepEqual(b.drain().filter((o) => o.type === 'check'), []);
  assert.equal(b.pendingTransactions()[0].nextCheck, null);
  b.setProducerOnline('PG', true);
  assert.equal(b.nextEventAt(), 50_000);
  b.stepToNextEvent();
  assert.deepEqual(b.drain().filter((o) => o.type === 'check').map((c) => c.txn), [txn]);
});

test('rollback: never visible, its op record is written', () => {
  const b = new Broker({ default_queues: 1 });
  const { txn, offset } = b.prepare('PG', { topic: 'T', body: 'gone' });
  b.end(txn, 'rollback');
  assert.deepEqual(b.pull({ group: 'C', topic: 'T', queueId: 0, offset: 0 }).messages, []);
  const recs = b.rawRecords(0, 10);
  const op = recs.find((r) => r.topic === w.systemTopics().op);
  assert.equal(op.transactionType, 'rollback');
  assert.equal(op.fields.find((f) => f.name === 'PREPARED_TRANSACTION_OFFSET').value, offset);
  assert.equal(op.properties.find((p) => p.key === 'TAGS').value, 'd');
});

test('raw records: every field offset and length matches the record bytes', () => {
  const b = new Broker({ default_queues: 1 });
  b.send({ topic: 'Topic', body: 'payload', tag: 'T1', keys: ['k1', 'k2'], properties: { p: 'v' } });
  b.send({ topic: 'Topic', body: 'later', delayLevel: 1 });
  const recs = b.rawRecords(0, 100);
  assert.equal(recs.length, 2);
  assert.equal(recs[1].topic, w.systemTopics().schedule);
  for (const r of recs) {
    const dv = new DataView(r.bytes.buffer, r.bytes.byteOffset, r.bytes.byteLength);
    const f = Object.fromEntries(r.fields.map((x) => [x.name, x]));
    assert.equal(r.bytes.length, r.size);
    assert.equal(dv.getUint32(f.TOTALSIZE.at), r.size);
    assert.equal(dv.getUint32(f.MAGICCODE.at), 0xdaa320a7);
    assert.equal(Number(dv.getBigUint64(f.PHYSICALOFFSET.at)), r.offset);
    assert.equal(dv.getUint32(f.BODYLENGTH.at), f.BODY.len);
    const text = (x) => Buffer.from(r.bytes.subarray(x.at, x.at + x.len)).toString();
    assert.equal(text(f.BODY), r.body);
    assert.equal(r.bytes[f.TOPICLENGTH.at], f.TOPIC.len);
    assert.equal(text(f.TOPIC), r.topic);
    assert.equal(dv.getUint16(f.PROPERTIESLENGTH.at), f.PROPERTIES.len + f['PROPERTIES (__CRC32#)'].len);
    assert.match(text(f['PROPERTIES (__CRC32#)']), /^__CRC32#\x01\d{10}\x02$/);
    for (const p of r.properties) assert.equal(text(p), `${p.key}\x01${p.value}\x02`);
    // contiguous, covering the record exactly
    let at = 0;
    for (const x of r.fields) {
      assert.equal(x.at, at, x.name);
      at += x.len;
    }
    assert.equal(at, r.size);
    // decodeRecord gives the same view; a flipped byte is caught by the CRC
    assert.deepEqual(w.decodeRecord(r.bytes).fields, r.fields);
    const bad = r.bytes.slice();
    bad[f.BODY.at] ^= 1;
    assert.equal(code(() => w.decodeRecord(bad)), 'CORRUPTED');
  }
  const [user] = recs;
  assert.equal(user.properties.find((p) => p.key === 'KEYS').value, 'k1 k2');
  const [unit] = b.consumeQueue('Topic', 0);
  assert.equal(unit.offset, 0);
  assert.equal(unit.size, user.size);
  const ub = new DataView(unit.bytes.buffer, unit.bytes.byteOffset, 20);
  assert.equal(Number(ub.getBigUint64(0)), 0);
  assert.equal(ub.getUint32(8), user.size);
  assert.equal(Number(ub.getBigInt64(12)), unit.tagHash);
});

test('delays: pending until due, then in the consume queue', () => {
  const b = new Broker({ default_queues: 1 });
  b.send({ topic: 'D', body: 'at', deliverAtMs: 2500 });
  b.send({ topic: 'D', body: 'lvl', delayLevel: 1 });
  b.send({ topic: 'D', body: 'after', delayMs: 1500 });
  assert.deepEqual(b.pendingDelays().map((d) => [d.topic, d.due]), [['D', 2500], ['D', 1000], ['D', 1500]]);
  assert.equal(b.nextEventAt(), 1000);
  b.stepToNextEvent();
  assert.equal(b.consumeQueue('D', 0).length, 1);
  b.advanceTo(10_000);
  assert.equal(b.pendingDelayCount(), 0);
  const bodies = b.pull({ group: 'G', topic: 'D', queueId: 0, offset: 0 }).messages.map((m) => m.body);
  assert.deepEqual(bodies, ['lvl', 'after', 'at']);
});

test('receive, change invisible, ack; reopen keeps what the log holds', () => {
  const b = new Broker({ default_queues: 1 });
  b.sendBatch([{ topic: 'R', body: 'a' }, { topic: 'R', body: 'b' }]);
  const got = b.receive({ group: 'G', topic: 'R', invisibleMs: 1000, max: 10 });
  assert.deepEqual(got.map((r) => [r.message.body, r.attempt, r.visibleAt]), [['a', 1, 1000], ['b', 1, 1000]]);
  b.ack('G', got[0].handle);
  const changed = b.changeInvisible('G', got[1].handle, 5000);
  assert.equal(changed.visibleAt, 5000);
  // Changing the invisible time renews the attempt; it does not retire the handle it was given.
  assert.notEqual(changed.handle, got[1].handle);
  assert.equal(b.inflightCount('G', 'R'), 1);
  const report = b.reopen();
  assert.equal(report.records > 0, true);
  // Memory storage is never torn or damaged: nothing cut, nothing quarantined.
  assert.deepEqual([report.cuts, report.quarantined, report.bytesQuarantined], [[], [], 0]);
  assert.equal(b.inflightCount('G', 'R'), 1);
  b.advanceTo(5000);
  const again = b.receive({ group: 'G', topic: 'R', invisibleMs: 1000 });
  assert.deepEqual(again.map((r) => [r.message.body, r.attempt]), [['b', 2]]);
  // Redelivery is what makes the earlier attempt's handles stale.
  assert.equal(code(() => b.ack('G', got[1].handle)), 'STALE_RECEIPT_HANDLE');
  assert.equal(code(() => b.ack('G', changed.handle)), 'STALE_RECEIPT_HANDLE');
  b.ack('G', again[0].handle);
  assert.equal(b.inflightCount('G', 'R'), 0);
});

test('pull reads every queue unless a queue is given; a missing topic is UNKNOWN_TOPIC', () => {
  const b = new Broker({ default_queues: 4 });
  b.send({ topic: 'Q', body: 'q1', queueId: 1 });
  b.send({ topic: 'Q', body: 'q3', queueId: 3 });
  const one = b.pull({ group: 'G', topic: 'Q', queueId: 3, autoCommit: true });
  assert.deepEqual([one.messages.map((m) => m.body), one.nextOffset, one.queues.length], [['q3'], 1, 1]);
  const all = b.pull({ group: 'G', topic: 'Q', autoCommit: true });
  assert.deepEqual(all.messages.map((m) => m.body), ['q1']);
  assert.equal(all.nextOffset, undefined);
  assert.deepEqual(all.queues.map((q) => q.queueId), [0, 1, 2, 3]);
  assert.equal(code(() => b.pull({ group: 'G', topic: 'Qq' })), 'UNKNOWN_TOPIC');
  assert.equal(code(() => b.receive({ group: 'G', topic: 'Qq', invisibleMs: 1000 })), 'UNKNOWN_TOPIC');
  assert.equal(code(() => b.pull({ group: 'G', topic: 'Q', offset: 0 })), 'INVALID_ARGUMENT');
});

test('pull commits offsets when asked', () => {
  const b = new Broker({ default_queues: 1 });
  for (const x of ['1', '2', '3']) b.send({ topic: 'P', body: x });
  const r = b.pull({ group: 'G', topic: 'P', queueId: 0, max: 2, autoCommit: true });
  assert.deepEqual([r.messages.map((m) => m.body), r.nextOffset, r.maxOffset], [['1', '2'], 2, 3]);
  assert.equal(b.committedOffset('G', 'P', 0), 2);
  b.commitOffset('G', 'P', 0, 3);
  assert.equal(b.pull({ group: 'G', topic: 'P', queueId: 0 }).messages.length, 0);
  assert.deepEqual(b.topics(), [{ name: 'P', queues: [{ queueId: 0, nextOffset: 3, visible: 3 }] }]);
});

test('a whole number out of range: the text every binding uses', () => {
  const b = new Broker();
  try {
    b.advanceTo(-1);
    assert.fail('did not throw');
  } catch (e) {
    assert.equal(e.code, 'INVALID_ARGUMENT');
    assert.equal(e.message, 'invalid argument: ms must be a whole number from 0 to 9007199254740991, not -1');
  }
});
