'use strict';
// The one table of error codes (tests/vectors/error-codes.json): the code of every kind of
// failure is the same in Node, Python and wasm (`rocklet_embed::ErrorKind::code`). Each case
// of the vector is triggered through the public API and the code of what it throws compared.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Broker, RockletError, ClientError, ConfigError, StorageError, CorruptedError, StateError } = require('..');

const VECTOR = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'tests', 'vectors', 'error-codes.json'), 'utf8'));

// The class Node throws for each kind the cases trigger.
const CLASS_OF_KIND = {
  client: ClientError,
  argument: ClientError,
  config: ConfigError,
  storage: StorageError,
  corrupted: CorruptedError,
  failed: StateError,
  closed: StateError,
  wrong_clock: StateError,
};

function withDir(fn) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rocklet-node-codes-'));
  const done = () => fs.rmSync(dir, { recursive: true, force: true });
  return Promise.resolve().then(() => fn(dir)).finally(done);
}

function writeCorrupt(dir) {
  const bodies = ['a', 'b', 'c'].map((c) => c.repeat(100));
  const b = new Broker({ path: dir, clock: 'manual', flush: 'sync', defaultQueues: 1 });
  for (const body of bodies) b.send('T', body);
  b.close();
  const seg = path.join(dir, fs.readdirSync(dir).find((n) => /^\d+$/.test(n)));
  const bytes = fs.readFileSync(seg);
  bytes[bytes.indexOf(bodies[1]) + 50] ^= 0xff;
  fs.writeFileSync(seg, bytes);
}

// Does what the case says; it must throw (or reject).
async function trigger(c, dir) {
  switch (c.case) {
    case 'client_error':
      return new Broker({ clock: 'manual' }).send('bad topic', 'x');
    case 'bad_config':
      return new Broker({ clock: 'manual', maxMessageSize: 0 });
    case 'bad_argument':
      return new Broker({ clock: 'manual' }).advanceTo(-1);
    case 'closed': {
      const b = new Broker({ clock: 'manual' });
      b.close();
      return b.send('T', 'x');
    }
    case 'wrong_clock': {
      const b = new Broker();
      try {
        return await b.advance(1);
      } finally {
        b.close();
      }
    }
    case 'corrupt_log':
      writeCorrupt(dir);
      return new Broker({ path: dir, clock: 'manual' });
    case 'failed': {
      const b = new Broker({ path: dir, clock: 'manual', flush: 'sync' });
      try {
        b.__failSyncForTest('disk gone');
        return b.send('T', 'x');
      } finally {
        b.close();
      }
    }
    case 'locked': {
      const b = new Broker({ path: dir, clock: 'manual' });
      try {
        return new Broker({ path: dir, clock: 'manual' });
      } finally {
        b.close();
      }
    }
    default:
      throw new Error(`case ${c.case} of error-codes.json is not run by the Node tests`);
  }
}

test('the vector names a code per kind and cases', () => {
  assert.ok(Object.keys(VECTOR.codes).length >= 10);
  assert.ok(VECTOR.cases.length > 0);
});

for (const c of VECTOR.cases) {
  test(`error code: ${c.case} (${c.how})`, () => withDir(async (dir) => {
    let thrown;
    try {
      await trigger(c, dir);
    } catch (e) {
      thrown = e;
    }
    assert.ok(thrown instanceof RockletError, `${c.case} threw ${thrown}`);
    assert.ok(thrown instanceof CLASS_OF_KIND[c.kind], `${c.case}: ${thrown.name}`);
    assert.equal(thrown.code, c.expect, `${c.case}: ${thrown.message}`);
    if (c.kind !== 'client') assert.equal(thrown.code, VECTOR.codes[c.kind]);
  }));
}
