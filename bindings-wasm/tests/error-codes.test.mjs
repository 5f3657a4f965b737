// node --test bindings-wasm/tests/error-codes.test.mjs   (PKG_NODE = dir of the nodejs glue)
// The one table of error codes (tests/vectors/error-codes.json): the code of every kind of
// failure is the same in wasm, Node and Python (`rocklet_embed::ErrorKind::code`). The cases
// this binding can reach (memory storage and the manual clock only) are triggered through
// its API and the code of what it throws compared.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const w = require(path.resolve(process.env.PKG_NODE ?? path.join(root, 'target/wasm-pkg/node'), 'rocklet_wasm.js'));
const { Broker } = w;
const VECTOR = JSON.parse(fs.readFileSync(path.join(root, 'tests/vectors/error-codes.json'), 'utf8'));

// What this binding cannot do, by the case's `needs` (a case needing anything else must run).
const CANNOT = {
  path: 'memory storage only',
  system_clock: 'the manual clock only',
  close: 'no close (the object is freed)',
  fail_sync_hook: 'no hook that fails a sync',
};

// Does what the case says; it must throw.
function trigger(c) {
  switch (c.case) {
    case 'client_error':
      return new Broker().send({ topic: 'bad topic', body: 'x' });
    case 'bad_config':
      return new Broker({ max_message_size: 0 });
    case 'bad_argument':
      return new Broker().advanceTo(-1);
    default:
      throw new Error(`case ${c.case} of error-codes.json is not run by the wasm tests`);
  }
}

for (const c of VECTOR.cases) {
  const skip = CANNOT[c.needs];
  test(`error code: ${c.case} (${c.how})`, { skip }, () => {
    let thrown;
    try {
      trigger(c);
    } catch (e) {
      thrown = e;
    }
    assert.ok(thrown instanceof Error, `${c.case} threw ${thrown}`);
    assert.equal(thrown.name, 'RockletError', `${c.case}: ${thrown.message}`);
    assert.equal(thrown.code, c.expect, `${c.case}: ${thrown.message}`);
    if (c.kind !== 'client') assert.equal(thrown.code, VECTOR.codes[c.kind]);
  });
}
