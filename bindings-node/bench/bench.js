'use strict';
// Send and transaction throughput from JS with 1 KiB Buffer bodies (not a test).
//   cargo build -p rocklet-node --release && cp target/release/librocklet_node.so bindings-node/rocklet.node
//   node bindings-node/bench/bench.js [--n 100000] [--path DIR]
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Broker } = require('..');

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const N = Number(opt('n', 100_000));
const body = Buffer.alloc(1024, 7);

function fresh(durable) {
  const dir = durable ? fs.mkdtempSync(path.join(os.tmpdir(), 'rocklet-bench-')) : undefined;
  const b = new Broker({ clock: 'manual', ...(dir ? { path: dir } : {}) });
  return { b, done: () => { b.close(); if (dir) fs.rmSync(dir, { recursive: true, force: true }); } };
}

function report(name, n, ns) {
  const s = Number(ns) / 1e9;
  console.log(`${name.padEnd(40)} ${String(n).padStart(8)} ops  ${(n / s).toFixed(0).padStart(9)} ops/s  ${(Number(ns) / n / 1000).toFixed(2).padStart(7)} µs/op`);
}

async function main() {
  console.log(`node ${process.version}, ${os.cpus()[0].model} x${os.cpus().length}, ${os.platform()} ${os.release()}, N=${N}`);
  for (const durable of [false, true]) {
    const where = durable ? 'file' : 'memory';
    {
      const { b, done } = fresh(durable);
      for (let i = 0; i < 1000; i++) b.send('Bench', body); // warm-up
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < N; i++) b.send('Bench', body);
      report(`send 1 KiB (${where})`, N, process.hrtime.bigint() - t0);
      done();
    }
    {
      const { b, done } = fresh(durable);
      const batch = Array.from({ length: 32 }, () => body);
      const rounds = Math.ceil(N / 32);
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < rounds; i++) b.sendBatch('Bench', batch);
      report(`sendBatch 32 x 1 KiB (${where}), per msg`, rounds * 32, process.hrtime.bigint() - t0);
      done();
    }
    {
      const { b, done } = fresh(durable);
      const n = Math.floor(N / 2);
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < n; i++) {
        const t = b.prepare('PG', { topic: 'Bench', body });
        b.commit(t.txn);
      }
      report(`prepare + commit 1 KiB (${where})`, n, process.hrtime.bigint() - t0);
      done();
    }
    {
      const { b, done } = fresh(durable);
      const n = Math.floor(N / 4);
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < n; i++) await b.transaction('PG', { topic: 'Bench', body }, async () => i);
      report(`await transaction() 1 KiB (${where})`, n, process.hrtime.bigint() - t0);
      done();
    }
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
