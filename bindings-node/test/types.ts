// Compiled with `tsc --noEmit` in CI (tests/ci/node.sh): uses the package the way a
// TypeScript user would, so index.d.ts cannot drift from what the tests exercise.
import { Broker, ClientError, CorruptedError, RockletError, type CheckRequest, type ReceivedMessage, type Resolution } from 'rocklet';

async function main(): Promise<void> {
  const broker = new Broker({ clock: 'manual', transactionTimeoutMs: 6000, flush: 'async', trace: true });
  const sent = broker.send('T', Buffer.from('x'), { tag: 'a', keys: ['k'], properties: { p: 'v' }, delayLevel: 1 });
  const offset: number = sent.queueOffset;
  broker.sendBatch('T', ['a', Buffer.from('b'), { body: 'c', tag: 't' }], { queueId: 0 });
  broker.setChecker('PG', async (check: CheckRequest): Promise<Resolution> => (check.message.keys.length ? 'commit' : 'rollback'));
  const half = broker.prepare('PG', { topic: 'T', body: 'h', checkImmunityMs: 1000 });
  const txn: string = half.txn;
  broker.commit(txn);
  const result = await broker.transaction('PG', { topic: 'T', body: 'y' }, async (tx) => tx.txn.length);
  const n: number = result.value;
  await broker.advance(1000);
  await broker.advanceTo(5000);
  await broker.runUntilIdle();
  const received: ReceivedMessage[] = broker.receive('G', 'T', { invisibleMs: 1000, max: 2 });
  for (const m of received) broker.ack('G', m.handle);
  for await (const m of broker.subscribe('G', 'T', { invisibleMs: 1000 })) {
    const body: Buffer = m.body;
    if (body.length) break;
  }
  const pulled = broker.pull('G', 'T', 0, { max: 10, autoCommit: false });
  const next: number = pulled.nextOffset;
  // Without a queue id: every queue; the per-queue offsets are in `queues`.
  const all = broker.pull('G', 'T', { max: 10 });
  const firstQueue: number | undefined = all.queues[0]?.nextOffset;
  // @ts-expect-error: a pull across queues has no single next offset
  const notOne: number = all.nextOffset;
  // A checker answers one of the three resolutions; any other string does not type-check.
  broker.setChecker('PG2', () => 'unknown');
  // @ts-expect-error: 'yes' is not a resolution
  broker.setChecker('PG3', () => 'yes');
  const someString: string = 'commit';
  // @ts-expect-error: a plain string is not a resolution
  broker.setChecker('PG4', () => someString);
  const pending = broker.pendingTransactions().map((p) => p.nextCheck ?? -1);
  const kinds = broker.takeTrace().map((e) => e.kind);
  broker.on('checkerError', (err, check) => console.log(err, check.txn));
  try {
    broker.send('', 'x');
  } catch (e) {
    if (e instanceof ClientError) console.log(e.code);
    if (e instanceof RockletError) console.log(e.code);
  }
  const why: string | null = broker.failed;
  const now: number = broker.now;
  console.log(now, offset, n, next, firstQueue, notOne, pending, kinds, broker.stats().committed, broker.config().delayLevels, why);
  broker.close();
  try {
    const repaired = new Broker({ path: 'data', repair: true });
    const report = repaired.recoveryReport();
    const kept: (string | undefined)[] = report.cuts.map((c) => c.keptAs);
    const names: string[] = report.quarantined.map((q) => q.name);
    console.log(kept, names, report.bytesQuarantined);
    repaired.close();
  } catch (e) {
    if (e instanceof CorruptedError) console.log(e.offset);
  }
}

void main();
