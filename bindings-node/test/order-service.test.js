// A sample of how to test your own service with rocklet: a fake order service that writes
// an order and publishes "order created" in one transactional message, and its checker.
// This file is quoted in README.md.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Broker } = require('rocklet');

// --- the service under test -------------------------------------------------------------
class OrderService {
  constructor(broker, db) {
    this.broker = broker;
    this.db = db; // order id -> order
    // The broker asks the producer group about transactions it never heard the end of.
    broker.setChecker('order-service', async ({ message }) => {
      const id = message.keys[0];
      return this.db.has(id) ? 'commit' : 'rollback';
    });
  }

  // Writes the order and publishes the event atomically.
  async create(id, total) {
    const event = { topic: 'orders', body: JSON.stringify({ id, total }), keys: [id], tag: 'created' };
    return this.broker.transaction('order-service', event, async () => {
      if (total <= 0) throw new Error('total must be positive');
      this.db.set(id, { id, total });
    });
  }
}

// What a consumer of the topic sees.
function published(broker) {
  return broker.receive('billing', 'orders', { invisibleMs: 60_000 }).map((m) => JSON.parse(m.body));
}

// --- the tests ----------------------------------------------------------------------------
test('an order is published once it is written', async () => {
  const broker = new Broker({ clock: 'manual' });
  const orders = new OrderService(broker, new Map());
  await orders.create('o-1', 30);
  assert.deepEqual(published(broker), [{ id: 'o-1', total: 30 }]);
});

test('a failed order is never published', async () => {
  const broker = new Broker({ clock: 'manual' });
  const orders = new OrderService(broker, new Map());
  await assert.rejects(orders.create('o-2', 0), /positive/);
  assert.deepEqual(published(broker), []);
  assert.deepEqual(broker.pendingTransactions(), []);
});

test('the producer crashes after the half message: the check commits it', async () => {
  const broker = new Broker({ clock: 'manual', transactionTimeoutMs: 6_000 });
  const db = new Map();
  new OrderService(broker, db); // registers the checker
  // The crash: the half message is stored and the order written, but the process dies
  // before it could commit.
  broker.prepare('order-service', { topic: 'orders', body: JSON.stringify({ id: 'o-3', total: 5 }), keys: ['o-3'] });
  db.set('o-3', { id: 'o-3', total: 5 });
  assert.deepEqual(published(broker), []); // invisible while pending

  await broker.advance(5_999); // not yet checked
  assert.equal(broker.pendingTransactions().length, 1);
  await broker.advance(1); // the check runs the checker, which finds the order
  assert.deepEqual(published(broker), [{ id: 'o-3', total: 5 }]);
});

test('the producer crashes before writing the order: the check rolls it back', async () => {
  const broker = new Broker({ clock: 'manual', trace: true });
  new OrderService(broker, new Map());
  broker.prepare('order-service', { topic: 'orders', body: '{"id":"o-4"}', keys: ['o-4'] });
  await broker.runUntilIdle();
  assert.deepEqual(published(broker), []);
  // The trace tells the story.
  const kinds = broker.takeTrace().map((e) => e.kind);
  assert.deepEqual(kinds, ['half_stored', 'check_sent', 'rolled_back']);
});
