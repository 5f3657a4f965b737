'use strict';
// rocklet: RocketMQ's transactional message store in-process, over the native addon
// (rocklet.node, built from src/ by cargo). This file only adds async sugar: checkers per
// producer group, transaction(), advance()/runUntilIdle() for the manual clock, the system
// clock's timer, and subscribe(). Every message decision stays in the core.

// The addon: ./rocklet.node when built here (cargo, tests/ci/node.sh), else the package of
// this platform that npm installed as an optional dependency (napi's layout: rocklet-<triple>,
// e.g. rocklet-linux-x64-gnu, from bindings-node/npm/<triple>/; dist/build.sh packs both).
function loadNative() {
  try {
    return require('./rocklet.node');
  } catch (e) {
    if (e.code !== 'MODULE_NOT_FOUND') throw e;
  }
  let libc = '';
  if (process.platform === 'linux') {
    const report = process.report && process.report.getReport();
    libc = report && report.header && report.header.glibcVersionRuntime ? '-gnu' : '-musl';
  }
  const triple = `${process.platform}-${process.arch}${libc}`;
  try {
    return require(`rocklet-${triple}`);
  } catch (e) {
    if (e.code !== 'MODULE_NOT_FOUND') throw e;
    throw new Error(
      `rocklet: no native addon for ${triple}: install rocklet-${triple} next to rocklet ` +
        '(npm does when the platform has one), or build it from the source: ' +
        'cargo build --release -p rocklet-node && cp target/release/librocklet_node.so bindings-node/rocklet.node',
    );
  }
}

const native = loadNative();

const { RockletError, ClientError, ConfigError, StorageError, CorruptedError, StateError } = native.errorClasses();
const Native = native.Broker;

const KICK = Symbol('rocklet.kick');

// Native methods after which the core may have outputs for the host (checks, availability
// notices): each is followed by a kick that routes them.
const DRIVING = [
  'send', 'sendBatch', 'prepare', 'endTransaction', 'commit', 'rollback', 'setProducerOnline',
  'createTopic', 'pull', 'commitOffset', 'receive', 'ack', 'changeInvisible',
  'forwardToDeadLetter', 'sendBack', 'sync', 'close', 'fireDue', '__failSyncForTest', 'subscriptionNext',
];

const MAX_TIMER = 2 ** 31 - 1;

class Broker extends Native {
  #checkers = new Map();
  #answering = new Set();
  #waiters = new Set();
  #listeners = new Map();
  #timer = null;
  #timerAt = null;
  #clockChain = Promise.resolve();

  /**
   * @param {object} [options] `{ path?, clock?: 'system' | 'manual', now?, ...config }`.
   */
  constructor(options) {
    super(options);
    this[KICK]();
  }

  // ---- checkers ----------------------------------------------------------------------

  /** Registers the checker of producer group `group` (the group comes online). */
  setChecker(group, checker) {
    if (typeof checker !== 'function') {
      throw new ClientError('invalid argument: checker must be a function', 'INVALID_ARGUMENT');
    }
    this.setProducerOnline(group, true);
    this.#checkers.set(group, checker);
  }

  /** Removes a group's checker (its producer went away: its checks wait). */
  removeChecker(group) {
    this.setProducerOnline(group, false);
    this.#checkers.delete(group);
  }

  #answer(check) {
    const checker = this.#checkers.get(check.group);
    // No checker any more: the check goes unanswered and the transaction stays pending.
    if (!checker) return;
    const p = (async () => {
      let answer;
      try {
        answer = await checker(check);
      } catch (err) {
        this.#checkerError(err, check);
        return;
      }
      if (this.closed) return;
      try {
        this.endTransaction(check.txn, answer, { fromCheck: true });
      } catch (err) {
        this.#checkerError(err, check);
      }
    })();
    this.#answering.add(p);
    p.finally(() => this.#answering.delete(p));
  }

  #checkerError(err, check) {
    const fns = this.#listeners.get('checkerError');
    if (fns && fns.size) {
      for (const fn of fns) fn(err, check);
    } else {
      process.emitWarning(
        `rocklet: the checker of group '${check.group}' failed for transaction ${check.txn}` +
          ` (it stays pending): ${err && err.message}`,
        { code: 'ROCKLET_CHECKER_FAILED' },
      );
    }
  }

  /** `on('checkerError', (err, check) => ...)`: a checker threw or answered nonsense. */
  on(event, fn) {
    if (event !== 'checkerError') {
      throw new ClientError(`invalid argument: no event '${event}' (known: checkerError)`, 'INVALID_ARGUMENT');
    }
    if (!this.#listeners.has(event)) this.#listeners.set(event, new Set());
    this.#listeners.get(event).add(fn);
    return this;
  }

  off(event, fn) {
    this.#listeners.get(event)?.delete(fn);
    return this;
  }

  /** Waits until every checker answer under way has been fed back. */
  async #settle() {
    while (this.#answering.size) await Promise.allSettled([...this.#answering]);
  }

  // Routes what the core handed out: checks to checkers, availability to subscribers; and
  // re-arms the system clock's timer for the core's next deadline.
  [KICK]() {
    for (const check of super.takeChecks()) this.#answer(check);
    const available = super.takeAvailable();
    // A failed broker takes nothing more: waiters wake to the error, no timer fires.
    const stopped = this.closed || this.failed != null;
    if (available.length || stopped) {
      const topics = new Set(available.map((a) => a.topic));
      for (const w of this.#waiters) {
        if (stopped || topics.has(w.topic)) w.wake();
      }
    }
    if (this.clock === 'system') this.#arm(stopped);
  }

  #arm(closed) {
    const due = closed ? null : super.pollTimeout();
    if (due == null) {
      if (this.#timer) clearTimeout(this.#timer);
      this.#timer = null;
      this.#timerAt = null;
      return;
    }
    if (this.#timer && this.#timerAt <= due) return;
    if (this.#timer) clearTimeout(this.#timer);
    const delay = Math.min(Math.max(0, due - Date.now()), MAX_TIMER);
    this.#timerAt = due;
    this.#timer = setTimeout(() => {
      this.#timer = null;
      this.#timerAt = null;
      if (!this.closed) this.fireDue();
    }, delay);
    // The broker alone does not keep the process alive; a waiting subscriber does.
    if (this.#waiters.size === 0) this.#timer.unref();
  }

  // ---- transactions ------------------------------------------------------------------

  /**
   * Prepares a half message, runs `fn(tx)` (the local transaction), then commits when it
   * resolves or rolls back when it throws (and rethrows). Answers the send result and the
   * callback's value.
   */
  async transaction(group, message, fn) {
    if (typeof fn !== 'function') {
      throw new ClientError('invalid argument: transaction needs a callback', 'INVALID_ARGUMENT');
    }
    const sent = this.prepare(group, message);
    let value;
    try {
      value = await fn(sent);
    } catch (err) {
      if (!this.closed) this.rollback(sent.txn, { group });
      throw err;
    }
    this.commit(sent.txn, { group });
    return { ...sent, value };
  }

  // ---- manual clock --------------------------------------------------------------------

  #serial(fn) {
    const run = this.#clockChain.then(fn);
    this.#clockChain = run.catch(() => {});
    return run;
  }

  // The embedding layer's drive: steps the manual clock timer by timer up to `target`
  // (every timer when null), handing out each step's checks; they are answered before the
  // next step. Call only inside #serial.
  async #drive(target) {
    this[KICK]();
    await this.#settle();
    super.driveStart(target);
    for (;;) {
      const checks = super.driveNext();
      if (!checks.length) break;
      for (const check of checks) this.#answer(check);
      this[KICK]();
      await this.#settle();
    }
    this[KICK]();
    await this.#settle();
  }

  /**
   * Manual clock: moves time forward by `ms`, firing every check, delivery and redelivery
   * due on the way at its own time, and waiting for the checkers' answers at each.
   */
  advance(ms) {
    if (this.clock !== 'manual') {
      return Promise.reject(new StateError("advance needs a broker with clock: 'manual'", 'WRONG_CLOCK'));
    }
    if (!Number.isSafeInteger(ms) || ms < 0) {
      return Promise.reject(new ClientError(`invalid argument: advance(ms) needs a whole number >= 0, got ${ms}`, 'INVALID_ARGUMENT'));
    }
    return this.#serial(() => this.#drive(this.now + ms));
  }

  /** Manual clock: advance(t - now). */
  advanceTo(t) {
    if (!Number.isSafeInteger(t)) {
      return Promise.reject(new ClientError(`invalid argument: advanceTo(t) needs a whole number, got ${t}`, 'INVALID_ARGUMENT'));
    }
    if (this.clock !== 'manual') {
      return Promise.reject(new StateError("advanceTo needs a broker with clock: 'manual'", 'WRONG_CLOCK'));
    }
    return this.#serial(() => this.#drive(t));
  }

  /** Manual clock: fires timers in order until the core has none left. */
  runUntilIdle() {
    if (this.clock !== 'manual') {
      return Promise.reject(new StateError("runUntilIdle needs a broker with clock: 'manual'", 'WRONG_CLOCK'));
    }
    return this.#serial(() => this.#drive(null));
  }

  // ---- consumers -------------------------------------------------------------------------

  #wait(topic) {
    let wake;
    const promise = new Promise((resolve) => {
      wake = resolve;
    });
    const w = {
      topic,
      wake: () => {
        this.#waiters.delete(w);
        if (this.#waiters.size === 0) this.#timer?.unref();
        wake();
      },
    };
    this.#waiters.add(w);
    this.#timer?.ref();
    return { promise, cancel: w.wake };
  }

  /**
   * `for await (const m of broker.subscribe(group, topic, { invisibleMs }))`: receives
   * messages one batch at a time and waits for more when there are none. A message is acked
   * when the loop moves on to the next one; leaving the loop (break, throw) leaves the
   * current one un-acked, so it comes back after `invisibleMs`.
   */
  subscribe(group, topic, options) {
    // Options (invisibleMs required) are read and refused natively, naming the bad one.
    const id = super.subscriptionOpen(group, topic, options);
    const broker = this;
    let done = false;
    let waiting = null;
    const stop = () => {
      if (!done) super.subscriptionStop(id);
      done = true;
    };
    return {
      [Symbol.asyncIterator]() {
        return this;
      },
      async next() {
        for (;;) {
          if (done || broker.closed) {
            stop();
            return { done: true, value: undefined };
          }
          const m = broker.subscriptionNext(id);
          if (m) return { done: false, value: m };
          waiting = broker.#wait(topic);
          await waiting.promise;
          waiting = null;
        }
      },
      async return() {
        if (waiting) waiting.cancel();
        stop();
        return { done: true, value: undefined };
      },
    };
  }
}

for (const name of DRIVING) {
  const f = Native.prototype[name];
  Object.defineProperty(Broker.prototype, name, {
    value: function (...args) {
      try {
        return f.apply(this, args);
      } finally {
        this[KICK]();
      }
    },
    writable: true,
    configurable: true,
  });
}

module.exports = { Broker, RockletError, ClientError, ConfigError, StorageError, CorruptedError, StateError };
