// node --test bindings-wasm/tests/names.test.mjs
// The playground names each op tag as RocketMQ's or as Rocklet's own, and knows every tag the
// core writes (core/src/broker/state.rs, `mod op`).
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { OP_TAGS, opLabel, opTag } from '../playground/names.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

test('"d" is RocketMQ\'s REMOVE_TAG; "c", "x", "e" are Rocklet\'s own', () => {
  assert.equal(opTag('d').origin, 'RocketMQ');
  assert.equal(opTag('d').name, 'REMOVE_TAG');
  for (const t of ['c', 'x', 'e']) {
    assert.equal(opTag(t).origin, 'Rocklet', t);
    assert.match(opLabel(t), /^Rocklet's own op "\w" \(.*not a RocketMQ tag\)$/);
  }
  assert.equal(opLabel('d'), 'RocketMQ\'s op "d" (REMOVE_TAG)');
  assert.equal(opTag('q').origin, 'Rocklet', 'an unknown tag is never called RocketMQ\'s');
});

test('every op tag the core writes is labelled', () => {
  const src = fs.readFileSync(path.join(root, 'core/src/broker/state.rs'), 'utf8');
  const block = src.match(/mod op \{([\s\S]*?)\n\}/);
  assert.ok(block, 'mod op not found in core/src/broker/state.rs');
  const tags = [...block[1].matchAll(/pub const \w+: &str = "([^"]+)";/g)].map((m) => m[1]);
  assert.deepEqual(tags.sort(), Object.keys(OP_TAGS).sort());
});
