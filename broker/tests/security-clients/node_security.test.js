// The official RocketMQ 5 Node client (rocketmq-client-nodejs 1.0.8), unmodified, with
// sessionCredentials against rocklet with authentication on: send, transaction, receive with
// the right credentials; a wrong secret, an unknown key and no credentials are refused and
// the client reports UNAUTHORIZED.
// Run: ROCKLET_BIN=target/debug/rocklet NODE_PATH=<dir>/node_modules node --test broker/tests/security-clients/
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const crypto = require('node:crypto');
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

const COMMIT = 1;
let broker;
let endpoints;
const quiet = { info() {}, warn() {}, error() {}, debug() {}, trace() {} };
const CONFIG = `
[auth]
client_utc_offsets = ["+00:00"]   # Node formats x-mq-date-time in UTC
timestamp_window_s = 300

[[auth.users]]
access_key = "root"
secret_key = "root-secret"
super_user = true

[[auth.users]]
access_key = "node-app"
secret_key = "node-secret"

[[auth.acls]]
user = "node-app"
resource = "Topic:NodeSec*"
actions = ["Pub", "Sub"]

[[auth.acls]]
user = "node-app"
resource = "Group:NodeSecG*"
actions = ["Sub"]

[core]
flush = "sync"
transaction_timeout_ms = 1000
transaction_check_interval_ms = 1000
`;

before(async () => {
  const bin = process.env.ROCKLET_BIN;
  assert.ok(bin && fs.existsSync(bin), 'set ROCKLET_BIN to the rocklet binary');
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rocklet-node-sec-'));
  const cfg = path.join(tmp, 'rocklet.toml');
  fs.writeFileSync(cfg, CONFIG);
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
      const m = / addr=(\S+)/.exec(buf);
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

const good = { accessKey: 'node-app', accessSecret: 'node-secret' };

test('signed send, transaction and receive', async () => {
  const topic = unique('NodeSecT');
  const checker = { async check() { return COMMIT; } };
  const p = new Producer({ endpoints, topic, checker, sessionCredentials: good, logger: quiet });
  await p.startup();
  try {
    assert.ok((await p.send({ topic, body: Buffer.from('plain') })).messageId);
    const tx = p.beginTransaction();
    await p.send({ topic, body: Buffer.from('txn') }, tx);
    await tx.commit();
  } finally {
    await p.shutdown();
  }
  const c = new SimpleConsumer({
    endpoints,
    consumerGroup: unique('NodeSecG'),
    subscriptions: new Map().set(topic, '*'),
    awaitDuration: 3000,
    sessionCredentials: good,
    logger: quiet,
  });
  await c.startup();
  try {
    const got = [];
    const deadline = Date.now() + 20000;
    while (got.length < 2 && Date.now() < deadline) {
      got.push(...await c.receive(16, 30000));
    }
    assert.deepStrictEqual(got.map(m => m.body.toString()).sort(), [ 'plain', 'txn' ]);
    for (const m of got) await c.ack(m);
  } finally {
    await c.shutdown();
  }
});

for (const [ name, creds, reason ] of [
  [ 'wrong secret', { accessKey: 'node-app', accessSecret: 'nope' }, 'bad signature' ],
  [ 'unknown access key', { accessKey: 'nobody', accessSecret: 'x' }, 'unknown access key' ],
  [ 'no credentials', undefined, 'no credentials' ],
]) {
  test(`${name} is refused as UNAUTHORIZED`, async () => {
    const topic = unique('NodeSecT');
    // The client logs the route query's UnauthorizedException (response-code=40100), then fails to start.
    const seen = [];
    const keep = (...args) => seen.push(args.map(a => (a && a.stack) ? `${a.name}: ${a.message}` : (typeof a === 'object' ? JSON.stringify(a) : String(a))).join(' '));
    const logger = { info() {}, debug() {}, trace() {}, warn: keep, error: keep };
    const p = new Producer({ endpoints, topic, sessionCredentials: creds, logger });
    await assert.rejects(async () => {
      await p.startup();
      await p.send({ topic, body: Buffer.from('refused') });
    });
    const logged = seen.join('\n');
    assert.match(logged, /response-code=40100/, logged);
    assert.match(logged, new RegExp(`UNAUTHORIZED: .*${reason}`), logged);
    assert.doesNotMatch(logged, /node-secret/);
    await p.shutdown().catch(() => {});
  });
}
