// node --test bindings-wasm/tests/vectors.test.mjs   (PKG_NODE = dir of the nodejs glue)
// Every shared scenario vector, through the wasm binding, compared with its `expect`s.
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { runScenario } from './vectors.mjs';

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const wasm = require(path.resolve(process.env.PKG_NODE ?? path.join(root, 'target/wasm-pkg/node'), 'rocklet_wasm.js'));
const dir = path.join(root, 'tests/vectors/scenarios');
const files = fs.existsSync(dir) ? fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort() : [];

test('there are scenario vectors to run', () => assert.ok(files.length > 0, `no vectors in ${dir}`));

for (const f of files) {
  const scenario = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
  test(`vector ${scenario.name}`, () => {
    let compared = 0;
    runScenario(wasm, scenario, {
      onStep(i, step, result) {
        if (!('expect' in step)) return;
        compared++;
        assert.deepStrictEqual(result, step.expect, `${f} step ${i} (${step.op} at ${step.at ?? '-'})`);
      },
    });
    assert.ok(compared > 0, `${f} compares nothing`);
  });
}
