// Whose name the playground shows for a record: RocketMQ's (a learner finds it in RocketMQ's
// code and docs) or Rocklet's own (no RocketMQ counterpart). No DOM: the Node tests import it.

// Tags of the op records in RMQ_SYS_TRANS_OP_HALF_TOPIC, as rocklet-core writes them
// (core/src/broker/state.rs, `mod op`). Only "d" is RocketMQ's: TransactionalMessageUtil.REMOVE_TAG.
export const OP_TAGS = {
  d: {
    origin: 'RocketMQ',
    name: 'REMOVE_TAG',
    meaning: 'resolved: the transaction was committed or rolled back',
  },
  c: {
    origin: 'Rocklet',
    name: 'checked',
    meaning: 'a check was sent (RocketMQ writes no op record for it: it puts a copy of the half back into its queue, TRANSACTION_CHECK_TIMES incremented)',
  },
  x: {
    origin: 'Rocklet',
    name: 'check max',
    meaning: 'transactionCheckMax reached (RocketMQ moves the half to TRANS_CHECK_MAX_TIME_TOPIC without an op record)',
  },
  e: {
    origin: 'Rocklet',
    name: 'expired',
    meaning: 'older than half_reserve_ms (RocketMQ skips such a half without an op record)',
  },
};

// What an op tag is: `origin` 'RocketMQ' or 'Rocklet', a `name` and its `meaning`.
export function opTag(tag) {
  return OP_TAGS[tag] ?? { origin: 'Rocklet', name: `tag ${tag}`, meaning: 'not a tag this playground knows' };
}

// The words the timeline uses for an op record with this tag.
export function opLabel(tag) {
  const t = opTag(tag);
  return t.origin === 'RocketMQ' ? `RocketMQ's op "${tag}" (${t.name})` : `Rocklet's own op "${tag}" (${t.name}; not a RocketMQ tag)`;
}
