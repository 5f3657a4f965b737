// The official RocketMQ 5 Node client (rocketmq-client-nodejs 1.0.8), unmodified, against rocklet.
// Run: ROCKLET_BIN=target/debug/rocklet NODE_PATH=<dir>/node_modules node --test broker/tests/compat/
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const crypto = require('node:crypto');
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

// definition_pb TransactionResolution: COMMIT = 1, ROLLBACK = 2.
const COMMIT = 1;
const ROLLBACK = 2;

let broker;
let endpoints;
const quiet = { info() {}, warn() {}, error() {}, debug() {}, trace() {} };

before(async () => {
  const bin = process.env.ROCKLET_BIN;
  assert.ok(bin && fs.existsSync(bin), 'set ROCKLET_BIN to the rocklet binary');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rocklet-node-'));
  const cfg = path.join(tmp, 'rocklet.toml');
  fs.writeFileSync(cfg, '[core]\nflush = "sync"\ntransaction_timeout_ms = 1000\ntransaction_check_interval_ms = 1000\n');
  broker = spawn(bin, [ 'broker', '--listen', '127.0.0.1:0', '--data-dir', path.join(tmp, 'data'), '--config', cfg ], {
    stdio: [ 'ignore', 'ignore', 'pipe' ],
  });
  const log = fs.createWriteStream(path.join(tmp, 'broker.log'));
  endpoints = await new Promise((resolve, reject) => {
    let buf = '';
    const timer = setTimeout(() => reject(new Error('broker did not start: ' + buf)), 30000);
    broker.stderr.on('data', chunk => {
      log.write(chunk);
      if (endpoints) return;
      buf += chunk.toString();
      const m = /addr=(\S+)/.exec(buf);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    broker.on('exit', code => reject(new Error(`broker exited with ${code}: ${buf}`)));
  });
});

after(async () => {
  const code = await new Promise(resolve => {
    broker.removeAllListeners('exit');
    broker.on('exit', c => resolve(c));
    broker.kill('SIGTERM');
  });
  assert.strictEqual(code, 0, 'broker exits 0 on SIGTERM');
});

function unique(name) {
  return `${name}_${crypto.randomBytes(4).toString('hex')}`;
}

async function producer(topic, checker) {
  const p = new Producer({ endpoints, topic, checker, logger: quiet });
  await p.startup();
  return p;
}

async function consumer(topic, awaitDuration = 3000) {
  const c = new SimpleConsumer({
    endpoints,
    consumerGroup: unique('NodeG'),
    subscriptions: new Map().set(topic, '*'),
    awaitDuration,
    logger: quiet,
  });
  await c.startup();
  return c;
}

async function receiveAll(c, want, { timeoutMs = 15000, invisible = 30000 } = {}) {
  const got = [];
  const deadline = Date.now() + timeoutMs;
  while (got.length < want && Date.now() < deadline) {
    got.push(...await c.receive(16, invisible));
  }
  return got;
}

function checker(answer) {
  const c = { calls: [], async check(view) { c.calls.push(view.messageId); return answer; } };
  return c;
}

test('normal send, receive and ack', async () => {
  const topic = unique('NodeNormal');
  const p = await producer(topic);
  const receipt = await p.send({ topic, tag: 'TagA', keys: [ 'k1' ], body: Buffer.from('hello from node') });
  assert.ok(receipt.messageId);
  await p.shutdown();
  const c = await consumer(topic);
  try {
    const msgs = await receiveAll(c, 1);
    assert.deepStrictEqual(msgs.map(m => m.body.toString()), [ 'hello from node' ]);
    assert.strictEqual(msgs[0].messageId, receipt.messageId);
    assert.strictEqual(msgs[0].tag, 'TagA');
    assert.strictEqual(msgs[0].deliveryAttempt, 1);
    await c.ack(msgs[0]);
  } finally {
    await c.shutdown();
  }
});

test('delayed 3 s, never early', async () => {
  const topic = unique('NodeDelay');
  const p = await producer(topic);
  const at = new Date(Date.now() + 3000);
  await p.send({ topic, body: Buffer.from('later'), deliveryTimestamp: at });
  await p.shutdown();
  const c = await consumer(topic);
  try {
    const msgs = await receiveAll(c, 1);
    const receivedAt = Date.now();
    assert.deepStrictEqual(msgs.map(m => m.body.toString()), [ 'later' ]);
    assert.ok(receivedAt >= at.getTime(), `delivered ${at.getTime() - receivedAt} ms early`);
    await c.ack(msgs[0]);
  } finally {
    await c.shutdown();
  }
});

test('transaction commit is delivered, rollback never', async () => {
  const topic = unique('NodeTx');
  const ck = checker(ROLLBACK);
  const p = await producer(topic, ck);
  const c = await consumer(topic, 1000);
  try {
    const t1 = p.beginTransaction();
    await p.send({ topic, body: Buffer.from('commit me') }, t1);
    await t1.commit();
    const t2 = p.beginTransaction();
    await p.send({ topic, body: Buffer.from('roll me back') }, t2);
    await t2.rollback();
    const msgs = await receiveAll(c, 1);
    assert.deepStrictEqual(msgs.map(m => m.body.toString()), [ 'commit me' ]);
    await c.ack(msgs[0]);
    // Past the transaction timeout and a check interval: the rolled back one never comes.
    const more = await receiveAll(c, 1, { timeoutMs: 3500 });
    assert.deepStrictEqual(more, []);
    assert.deepStrictEqual(ck.calls, []);
  } finally {
    await c.shutdown();
    await p.shutdown();
  }
});

test('UNKNOWN transaction is committed by the checker after the broker checks', async () => {
  const topic = unique('NodeTxCheck');
  const ck = checker(COMMIT);
  const p = await producer(topic, ck);
  const c = await consumer(topic, 2000);
  try {
    const t = p.beginTransaction();
    const receipt = await p.send({ topic, body: Buffer.from('checked') }, t);
    // Neither commit nor rollback: the outcome is unknown until the broker asks.
    const msgs = await receiveAll(c, 1, { timeoutMs: 20000 });
    assert.ok(ck.calls.length >= 1, 'delivered only after a check');
    assert.strictEqual(ck.calls[0], receipt.messageId);
    assert.deepStrictEqual(msgs.map(m => m.body.toString()), [ 'checked' ]);
    await c.ack(msgs[0]);
    assert.deepStrictEqual(await c.receive(16, 30000), [], 'delivered once');
  } finally {
    await c.shutdown();
    await p.shutdown();
  }
});

test('changeInvisibleDuration then ack with the new handle', async () => {
  const topic = unique('NodeInvisible');
  const p = await producer(topic);
  await p.send({ topic, body: Buffer.from('slow') });
  await p.shutdown();
  const c = await consumer(topic, 1000);
  try {
    const [ m ] = await receiveAll(c, 1, { invisible: 2000 });
    const old = m.receiptHandle;
    await c.changeInvisibleDuration(m, 30000);
    assert.notStrictEqual(m.receiptHandle, old);
    await new Promise(r => setTimeout(r, 2500));
    assert.deepStrictEqual(await c.receive(16, 30000), [], 'the longer invisible time held');
    await c.ack(m);
  } finally {
    await c.shutdown();
  }
});

test('redelivery after the invisible time has deliveryAttempt 2', async () => {
  const topic = unique('NodeRedeliver');
  const p = await producer(topic);
  await p.send({ topic, body: Buffer.from('again') });
  await p.shutdown();
  const c = await consumer(topic, 5000);
  try {
    const [ first ] = await receiveAll(c, 1, { invisible: 2000 });
    assert.strictEqual(first.deliveryAttempt, 1);
    const [ second ] = await receiveAll(c, 1);
    assert.strictEqual(second.body.toString(), 'again');
    assert.strictEqual(second.deliveryAttempt, 2);
    await c.ack(second);
  } finally {
    await c.shutdown();
  }
});
