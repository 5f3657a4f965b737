// The npm tarballs, installed in a fresh project: rocklet loads its addon from the
// per-platform package (napi's layout), from CommonJS and ESM. Run in that project:
//   node npm_smoke.mjs [TRIPLE]     (the addon package expected: default linux-x64-gnu)
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import * as esm from 'rocklet';

const require = createRequire(import.meta.url);
const cjs = require('rocklet');
assert.equal(esm.Broker, cjs.Broker, 'ESM and CommonJS give the same Broker');
const main = require.resolve('rocklet');
assert.ok(main.includes('node_modules/rocklet/'), main);
assert.ok(!fs.existsSync(new URL('./node_modules/rocklet/rocklet.node', import.meta.url)), 'the main package ships no addon');
const triple = process.argv[2] ?? 'linux-x64-gnu';
const addon = require.resolve(`rocklet-${triple}`);
assert.ok(addon.endsWith(`rocklet.${triple}.node`), addon);

const broker = new esm.Broker({ clock: 'manual' });
broker.setChecker('PG', async () => 'commit');
broker.prepare('PG', { topic: 'T', body: 'from-the-tarball' }); // the producer "dies"
broker.rollback(broker.prepare('PG', { topic: 'T', body: 'rolled-back' }).txn);
await broker.advance(6000);                                      // the check commits it
const got = broker.receive('G', 'T', { invisibleMs: 1000 }).map((m) => m.body.toString());
assert.deepEqual(got, ['from-the-tarball']);
assert.throws(() => broker.send('', 'x'), (e) => e instanceof esm.ClientError && e.code === 'INVALID_TOPIC');
console.log(`npm OK (${process.arch}, node ${process.version}): rocklet from ${main}, addon from ${addon}`);
