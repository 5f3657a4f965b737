'use strict';
// `npm pack`, install the tarball into a fresh project, and use it from CommonJS and ESM.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');

const PKG = path.join(__dirname, '..');

test('npm pack installs and works from CommonJS and ESM', { timeout: 120_000 }, () => {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'rocklet-pack-'));
  try {
    const out = execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: PKG, encoding: 'utf8' });
    const [info] = JSON.parse(out);
    const files = info.files.map((f) => f.path).sort();
    assert.deepEqual(files, ['README.md', 'index.d.ts', 'index.js', 'index.mjs', 'package.json', 'rocklet.node']);
    const app = path.join(work, 'app');
    fs.mkdirSync(app);
    fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }));
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--offline', path.join(work, info.filename)], { cwd: app, stdio: 'pipe' });
    const smoke = `
      const broker = new Broker({ clock: 'manual' });
      broker.setChecker('PG', async () => 'commit');
      broker.prepare('PG', { topic: 'T', body: 'from-pack' });
      await broker.advance(6000);
      const got = broker.receive('G', 'T', { invisibleMs: 1000 }).map((m) => m.body.toString());
      if (got.join() !== 'from-pack') throw new Error('got ' + got);
      try { broker.send('', 'x'); } catch (e) { if (!(e instanceof ClientError) || e.code !== 'INVALID_TOPIC') throw e; }
      console.log('ok');`;
    fs.writeFileSync(path.join(app, 'cjs.cjs'), `const { Broker, ClientError } = require('rocklet');\n(async () => {${smoke}})().catch((e) => { console.error(e); process.exit(1); });\n`);
    fs.writeFileSync(path.join(app, 'esm.mjs'), `import { Broker, ClientError } from 'rocklet';\n${smoke}\n`);
    assert.equal(execFileSync(process.execPath, ['cjs.cjs'], { cwd: app, encoding: 'utf8' }).trim(), 'ok');
    assert.equal(execFileSync(process.execPath, ['esm.mjs'], { cwd: app, encoding: 'utf8' }).trim(), 'ok');
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
});
