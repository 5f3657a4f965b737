// Types of the npm package `rocklet`. Hand-maintained: the public API is the JS wrapper
// (index.js) over the native class, so napi's generator (which needs @napi-rs/cli and
// describes only the native class) is not used. CI checks this file two ways:
// `tsc --noEmit` over test/types.ts, and test/dts.test.js, which fails when a method or
// export exists at run time but not here, or the reverse.

/// <reference types="node" />

export type Resolution = 'commit' | 'rollback' | 'unknown';
export type Body = Buffer | Uint8Array | string;

/** Core `Config` fields, camelCase; absent ones keep the core's (RocketMQ's) defaults. */
export interface BrokerConfig {
  segmentSize?: number;
  flush?: 'async' | 'sync';
  maxMessageSize?: number;
  maxBatchSize?: number;
  /** Most record bytes one pull or receive returns (the first message always goes). */
  maxTransferBytes?: number;
  defaultQueues?: number;
  autoCreateTopics?: boolean;
  transactionTimeoutMs?: number;
  transactionCheckIntervalMs?: number;
  transactionCheckMax?: number;
  halfReserveMs?: number;
  delayLevels?: number[];
  maxDeliveryAttempts?: number;
  maxInvisibleMs?: number;
  /** Invisible time for hosts whose API lets a consumer leave it out. */
  defaultInvisibleMs?: number;
  /** Under `flush: 'async'`, how long appended bytes may wait for an fsync. */
  flushIntervalMs?: number;
  /** Collect trace events for `takeTrace()`. */
  trace?: boolean;
  storeHost?: { ip: [number, number, number, number]; port: number };
  /** Most consumer and producer groups; one more is refused (`TOO_MANY_GROUPS`). */
  maxGroups?: number;
  /** Most topics (user, retry, dead-letter); one more is refused (`TOO_MANY_TOPICS`). */
  maxTopics?: number;
  /** Consume-queue units one filtered pull or receive looks at, at most. */
  maxScanUnits?: number;
  /** Index messages by key and message id (default true; the index is in files beside the log). */
  indexKeys?: boolean;
  /** Blocks of consume-queue units (1,000 units, 16,000 bytes of memory a block) kept to serve
   * reads below each queue's recent tail (default 64; the units live in files beside the log). */
  cqCacheBlocks?: number;
}

export interface BrokerOptions extends BrokerConfig {
  /** Data directory (durable); in memory when absent. */
  path?: string;
  /** 'system' (default): a timer drives checks and deliveries. 'manual': `advance()` does. */
  clock?: 'system' | 'manual';
  /** Manual clock: start time in ms (default 0; never before the newest stored record). */
  now?: number;
  /**
   * Open a log with damage other than a torn tail (refused with `CorruptedError` otherwise):
   * every valid record stays, each damaged range moves to `path/quarantine/`.
   */
  repair?: boolean;
}

export interface SendOptions {
  tag?: string;
  keys?: string | string[];
  properties?: Record<string, string>;
  queueId?: number;
  /** RocketMQ delay level, 1..=delayLevels.length (0: none). */
  delayLevel?: number;
  /** Absolute delivery time, ms (the name Python's `deliver_at_ms` and wasm use). */
  deliverAtMs?: number;
  /** The same as `deliverAtMs` (its first name here). */
  deliverAt?: number;
  /** Delivery after this many ms. */
  delayMs?: number;
  messageId?: string;
  messageGroup?: string;
  flag?: number;
  bornTimestamp?: number;
}

export interface MessageInput extends SendOptions {
  topic: string;
  body: Body;
}

export interface PrepareInput extends MessageInput {
  /** No check before this many ms (CHECK_IMMUNITY_TIME_IN_SECONDS). */
  checkImmunityMs?: number;
}

export interface BatchMessage extends SendOptions {
  /** Defaults to the batch's topic. */
  topic?: string;
  body: Body;
}

export interface SendResult {
  msgId: string;
  topic: string;
  queueId: number;
  queueOffset: number;
  offset: number;
  /** The transaction of a half message: 16 hex digits. */
  txn?: string;
}

export interface Message {
  topic: string;
  queueId: number;
  queueOffset: number;
  offset: number;
  msgId: string;
  tag?: string;
  keys: string[];
  properties: Record<string, string>;
  body: Buffer;
  bornTimestamp: number;
  storeTimestamp: number;
  reconsumeTimes: number;
  flag: number;
  sysFlag: number;
  bornHost: string;
  storeHost: string;
}

export interface ReceivedMessage extends Message {
  handle: string;
  attempt: number;
  visibleAt: number;
}

export interface QueueRead {
  queueId: number;
  /** Where the next pull of this queue starts. */
  nextOffset: number;
  /** The queue's end (visible messages). */
  maxOffset: number;
}

/** What a pull read: without a queue id, every queue of the topic in order. */
export interface Pulled {
  messages: Message[];
  /** The queue's next offset when one queue was read, else absent (see `queues`). */
  nextOffset?: number;
  /** The queue's end when one queue was read, else absent. */
  maxOffset?: number;
  /** Each queue read, in order. */
  queues: QueueRead[];
}

/** What a pull of one queue read. */
export interface PulledQueue extends Pulled {
  nextOffset: number;
  maxOffset: number;
}

export interface Ended {
  txn: string;
  resolution: Resolution;
  duplicate: boolean;
}

export interface CheckRequest {
  group: string;
  txn: string;
  /** Which check of this transaction, from 1. */
  check: number;
  /** Broker time of the check. */
  at: number;
  message: Message;
}

/** What a checker answers: one of the three resolutions (any other string is a type error). */
export type Checker = (check: CheckRequest) => Resolution | Promise<Resolution>;

export type TraceKind =
  | 'stored' | 'half_stored' | 'committed' | 'rolled_back' | 'check_sent' | 'check_parked'
  | 'check_max_reached' | 'half_expired' | 'delay_stored' | 'delivered' | 'received' | 'acked'
  | 'redelivered' | 'dead_lettered' | 'offset_committed';

export interface TraceEvent {
  at: number;
  kind: TraceKind;
  offset: number;
  topic: string;
  detail: string;
}

export interface PendingTransaction {
  txn: string;
  group: string;
  topic: string;
  queueId: number;
  checks: number;
  /** Absent while parked (no checker for the group). */
  nextCheck?: number;
}

export interface PendingDelay {
  offset: number;
  topic: string;
  queueId: number;
  due: number;
}

export interface TopicInfo {
  name: string;
  queues: { queueId: number; nextOffset: number; visible: number }[];
}

export interface CqUnit {
  offset: number;
  size: number;
  tagHash: number;
}

export interface RecoveryReport {
  segments: number;
  records: number;
  bytesScanned: number;
  bytesTruncated: number;
  /** Bytes `repair: true` moved to quarantine. */
  bytesQuarantined: number;
  /** The torn tail cut (at most one). `keptAs`: the `quarantine/` file keeping its non-zero bytes. */
  cuts: { offset: number; bytes: number; reason: string; keptAs?: string }[];
  /** Damaged ranges `repair: true` moved to `quarantine/<name>` (empty after a plain open). */
  quarantined: { offset: number; bytes: number; reason: string; name: string }[];
}

export interface Stats {
  messagesStored: number;
  halvesStored: number;
  committed: number;
  rolledBack: number;
  unknownAnswers: number;
  checksSent: number;
  checksAnswered: number;
  checkMaxReached: number;
  halvesExpired: number;
  delayedStored: number;
  delayedDelivered: number;
  received: number;
  acked: number;
  redelivered: number;
  deadLettered: number;
  syncs: number;
  clientErrors: number;
}

export interface PullOptions {
  /** Start here instead of the group's committed offset (needs a queue id). */
  offset?: number;
  /** At most this many (default: as many as the core hands out at once). */
  max?: number;
  /** Tag expression: `*` or `a || b`. */
  tags?: string;
  /** Commit the offset after what is returned (default true). */
  autoCommit?: boolean;
}

export interface ReceiveOptions {
  invisibleMs: number;
  max?: number;
  queueId?: number;
  tags?: string;
}

export interface SubscribeOptions {
  invisibleMs: number;
  tags?: string;
  /** Messages per receive (default 1). */
  batch?: number;
}

export interface TransactionResult<T> extends SendResult {
  txn: string;
  value: T;
}

export declare class Broker {
  constructor(options?: BrokerOptions);

  // producer
  send(topic: string, body: Body, options?: SendOptions): SendResult;
  sendBatch(topic: string, messages: Array<Body | BatchMessage>, options?: { queueId?: number }): SendResult[];
  prepare(group: string, message: PrepareInput): SendResult & { txn: string };
  commit(txn: string, options?: { group?: string }): Ended;
  rollback(txn: string, options?: { group?: string }): Ended;
  endTransaction(txn: string, resolution: Resolution | string, options?: { group?: string; fromCheck?: boolean }): Ended;
  transaction<T>(group: string, message: PrepareInput, fn: (tx: SendResult & { txn: string }) => T | Promise<T>): Promise<TransactionResult<T>>;
  setChecker(group: string, checker: Checker): void;
  removeChecker(group: string): void;
  setProducerOnline(group: string, online: boolean): void;
  createTopic(name: string, queues: number): void;
  /** Declares a consumer group; `fifo` makes its receives orderly (RocketMQ's consumeMessageOrderly). */
  declareGroup(name: string, fifo: boolean): void;
  on(event: 'checkerError', fn: (err: unknown, check: CheckRequest) => void): this;
  off(event: 'checkerError', fn: (err: unknown, check: CheckRequest) => void): this;

  // consumer
  /**
   * Reads from the group's committed offsets: the queue `queueId` names, or every queue of
   * the topic in order (no queue id, `null`, or options in third place). A topic that does
   * not exist throws `ClientError` `UNKNOWN_TOPIC`.
   */
  pull(group: string, topic: string, queueId: number, options?: PullOptions): PulledQueue;
  pull(group: string, topic: string, queueId?: null, options?: PullOptions): Pulled;
  pull(group: string, topic: string, options: PullOptions): Pulled;
  commitOffset(group: string, topic: string, queueId: number, offset: number): void;
  receive(group: string, topic: string, options: ReceiveOptions): ReceivedMessage[];
  ack(group: string, handle: string): void;
  changeInvisible(group: string, handle: string, invisibleMs: number): { handle: string; visibleAt: number };
  forwardToDeadLetter(group: string, handle: string): void;
  sendBack(group: string, offset: number, options?: { delayLevel?: number }): SendResult;
  subscribe(group: string, topic: string, options: SubscribeOptions): AsyncIterableIterator<ReceivedMessage>;

  // clock
  readonly clock: 'system' | 'manual';
  /** The clock's reading in ms (a getter, as `clock`, `closed` and `failed`; the same name in Python and wasm). */
  readonly now: number;
  pollTimeout(): number | undefined;
  advance(ms: number): Promise<void>;
  advanceTo(t: number): Promise<void>;
  runUntilIdle(): Promise<void>;
  /** Manual clock, low level: fire the next timer due by `target`. */
  stepClock(target?: number | null): boolean;
  /** Manual clock, low level: start a drive to `target` (until idle when `null`); `advance` uses it. */
  driveStart(target?: number | null): void;
  /** Manual clock, low level: the checks of the drive's next step, `[]` when it is over. */
  driveNext(): CheckRequest[];
  /** Low level (`subscribe` uses it): opens a subscription, answering its id. */
  subscriptionOpen(group: string, topic: string, options: SubscribeOptions): number;
  /** Low level: the next message (acking the one before), or `null` when none is visible. */
  subscriptionNext(id: number): ReceivedMessage | null;
  /** Low level: ends a subscription, leaving its current message un-acked. */
  subscriptionStop(id: number): void;
  /** System clock, low level: fire what is due now (the timer calls it). */
  fireDue(): void;

  // outputs and introspection
  takeChecks(): CheckRequest[];
  takeAvailable(): { topic: string; queueId: number }[];
  takeTrace(): TraceEvent[];
  pendingTransactions(limit?: number): PendingTransaction[];
  pendingDelays(limit?: number): PendingDelay[];
  topics(): TopicInfo[];
  consumeQueue(topic: string, queueId: number): CqUnit[];
  committedOffset(group: string, topic: string, queueId: number): number | undefined;
  inflightCount(group: string, topic: string): number;
  stats(): Stats;
  logEnd(): number;
  recoveryReport(): RecoveryReport;
  config(): Required<BrokerConfig> & { notifyAvailable: boolean };

  // lifetime
  sync(): void;
  close(): void;
  readonly closed: boolean;
  /**
   * Why the broker stopped taking requests, or `null`: a sync failed, and every later call
   * throws `StateError` with code `FAILED`. Close it and open its path again.
   */
  readonly failed: string | null;
}

export declare class RockletError extends Error {
  constructor(message: string, code: string);
  /** Stable upper-case code: the core's ClientError code, or INVALID_ARGUMENT, INVALID_CONFIG, STORAGE, CORRUPTED, ENCODE, BROKER_CLOSED, WRONG_CLOCK, FAILED, INTERNAL (the table of tests/vectors/error-codes.json). */
  code: string;
}
export declare class ClientError extends RockletError {}
export declare class ConfigError extends RockletError {
  /** The option at fault (camelCase). */
  option: string;
}
export declare class StorageError extends RockletError {
  /** io::ErrorKind. */
  kind: string;
}
export declare class CorruptedError extends RockletError {
  /** Log offset where the damage starts. */
  offset: number;
}
export declare class StateError extends RockletError {}
