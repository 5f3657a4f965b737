'use strict';
// Recovery through the binding: a damaged log is refused with CorruptedError and left as it
// is, `repair: true` opens it with the damage in quarantine/, a torn tail is cut, and
// recoveryReport() says which.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Broker, CorruptedError, RockletError } = require('..');

const BODIES = ['a', 'b', 'c'].map((c) => c.repeat(100));
const pad = (n) => String(n).padStart(20, '0');

function withDir(fn) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rocklet-node-recovery-'));
  try {
    return fn(dir);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const segment = (dir) => {
  const segs = fs.readdirSync(dir).filter((n) => /^\d+$/.test(n));
  assert.equal(segs.length, 1);
  return path.join(dir, segs[0]);
};

// Three durable messages in one queue; their log offsets.
function writeThree(dir) {
  const b = new Broker({ path: dir, clock: 'manual', flush: 'sync', defaultQueues: 1 });
  const offsets = BODIES.map((body) => b.send('T', body).offset);
  b.close();
  return offsets;
}

// Flips a byte in the body of the second message; returns the damaged segment bytes.
function flipMiddleRecord(dir) {
  const seg = segment(dir);
  const bytes = fs.readFileSync(seg);
  bytes[bytes.indexOf(BODIES[1]) + 50] ^= 0xff;
  fs.writeFileSync(seg, bytes);
  return bytes;
}

const bodies = (b, group) => b.pull(group, 'T', 0).messages.map((m) => m.body.toString());

test('damage before valid records is refused with its offset and changes nothing', () => withDir((dir) => {
  const offsets = writeThree(dir);
  const damaged = flipMiddleRecord(dir);
  for (let i = 0; i < 2; i++) {
    assert.throws(() => new Broker({ path: dir, clock: 'manual' }), (e) => {
      assert.ok(e instanceof CorruptedError && e instanceof RockletError);
      assert.equal(e.code, 'CORRUPTED');
      assert.equal(e.offset, offsets[1]);
      assert.match(e.message, new RegExp(`segment ${pad(0)} at position ${offsets[1]}`));
      assert.match(e.message, /repair: true/);
      return true;
    });
    assert.deepEqual(fs.readFileSync(segment(dir)), damaged);
    assert.equal(fs.existsSync(path.join(dir, 'quarantine')), false);
  }
}));

test('repair: true keeps every valid record and moves the damage to quarantine/', () => withDir((dir) => {
  const offsets = writeThree(dir);
  const damaged = flipMiddleRecord(dir);
  let b = new Broker({ path: dir, clock: 'manual', repair: true });
  assert.deepEqual(bodies(b, 'G'), [BODIES[0], BODIES[2]]);
  const report = b.recoveryReport();
  b.close();
  assert.deepEqual(report.cuts, []);
  assert.equal(report.quarantined.length, 1);
  const [q] = report.quarantined;
  assert.deepEqual([q.offset, q.bytes, q.name], [offsets[1], offsets[2] - offsets[1], `${pad(offsets[1])}-${pad(offsets[2])}.damaged`]);
  assert.match(q.reason, new RegExp(`segment ${pad(0)}`));
  assert.equal(report.bytesQuarantined, q.bytes);
  assert.deepEqual(fs.readFileSync(path.join(dir, 'quarantine', q.name)), damaged.subarray(offsets[1], offsets[2]));
  // The repair is durable: a plain open finds nothing to refuse.
  b = new Broker({ path: dir, clock: 'manual' });
  assert.deepEqual(b.recoveryReport().quarantined, []);
  assert.deepEqual(bodies(b, 'G2'), [BODIES[0], BODIES[2]]);
  b.close();
}));

test('zeros at the tail are the end of the data: no cut, nothing changed', () => withDir((dir) => {
  writeThree(dir);
  const seg = segment(dir);
  const end = fs.statSync(seg).size;
  fs.appendFileSync(seg, Buffer.alloc(64));
  const b = new Broker({ path: dir, clock: 'manual' });
  const report = b.recoveryReport();
  assert.equal(fs.statSync(seg).size, end + 64, 'the zeros were cut');
  assert.deepEqual(bodies(b, 'G'), BODIES);
  b.close();
  assert.deepEqual(report.cuts, []);
  assert.equal(report.bytesTruncated, 0);
  assert.deepEqual(report.quarantined, []);
}));

test('a torn record at the tail is cut and its bytes kept in quarantine/', () => withDir((dir) => {
  writeThree(dir);
  const seg = segment(dir);
  const end = fs.statSync(seg).size;
  const torn = Buffer.concat([Buffer.from([0, 0, 0, 0x30]), Buffer.from('torn tail of a record')]);
  fs.appendFileSync(seg, torn);
  const b = new Broker({ path: dir, clock: 'manual' });
  const report = b.recoveryReport();
  assert.deepEqual(bodies(b, 'G'), BODIES);
  b.close();
  assert.equal(report.cuts.length, 1);
  const [cut] = report.cuts;
  assert.deepEqual([cut.offset, cut.bytes], [end, torn.length]);
  assert.equal(typeof cut.keptAs, 'string');
  assert.deepEqual(fs.readFileSync(path.join(dir, 'quarantine', cut.keptAs)), torn);
}));

test('repair must be a boolean', () => {
  assert.throws(() => new Broker({ repair: 'yes' }), (e) => e.code === 'INVALID_ARGUMENT' && /repair/.test(e.message));
});
