// The consumer side of the Kafka worker, apart from what it does with the
// messages: the group member's settings, and eachBatch taken `size` messages at
// a time, each chunk settled, then its offsets resolved and committed (never
// past what was settled), then a heartbeat. On the retry topic a chunk stops
// at the first copy that is not due yet and the partition pauses until it is.
// The copy each verdict asks for, and the guard that keeps one retry chain
// per event when a crash redelivers a message whose copy was already sent.
import { HEADERS, headerText } from './topology.mjs';

/**
 * A group member: heartbeats every 3 s (a third of a shorter session), waits for the others' rejoin twice
 * its session (10 s at least). A fetch waits up to FETCH_MAX_WAIT_MS for records (kafkajs's default 5000;
 * the broker of the tests answers 0.3–2.4 s late with it, so its tests set 100).
 */
export function createConsumer(
  kafka,
  groupId,
  {
    sessionTimeoutMs = Number(process.env.SESSION_TIMEOUT_MS || 30_000),
    maxWaitTimeInMs = Number(process.env.FETCH_MAX_WAIT_MS || 5000),
  } = {},
) {
  return kafka.consumer({
    groupId,
    maxWaitTimeInMs,
    sessionTimeout: sessionTimeoutMs,
    heartbeatInterval: Math.min(3000, Math.floor(sessionTimeoutMs / 3)),
    rebalanceTimeout: Math.max(10_000, 2 * sessionTimeoutMs),
    allowAutoTopicCreation: false,
  });
}

/** The delivery this is: 1 on the main topic, the header's count on a retry copy. */
export function attemptOf(message) {
  const attempt = Number(headerText(message, HEADERS.attempt) ?? 1);
  return Number.isSafeInteger(attempt) && attempt >= 1 ? attempt : 1;
}

/** The original message a copy was made of: the header of a copy, the message's own position otherwise. */
export function originOf(topic, partition, message) {
  return headerText(message, HEADERS.origin) ?? `${topic}/${partition}/${message.offset}`;
}

/**
 * The record a verdict sends (to `names`' retry, dead or parked topic), or
 * null for an ack. The origin is carried forward: every copy of one event,
 * a copy of a copy too, names the message the event first came in.
 */
export function copyFor(names, topic, partition, message, verdict, attempt) {
  if (verdict.action === 'ack') return null;
  const headers = {
    [HEADERS.code]: verdict.error.code,
    [HEADERS.reason]: String(verdict.error.details.reason ?? verdict.error.message).slice(0, 200),
    [HEADERS.origin]: originOf(topic, partition, message),
  };
  if (verdict.action === 'retry') {
    headers[HEADERS.attempt] = String(attempt + 1);
    headers[HEADERS.notBefore] = String(Date.now() + verdict.retryAfterMs);
  }
  const to = { retry: names.retry, 'dead-letter': names.dead, park: names.parked }[verdict.action];
  return { topic: to, message: { key: message.key, value: message.value, headers } };
}

/**
 * One retry chain per event, as far as a worker can keep it without the
 * store. A member killed after its retry copy was acknowledged and before its
 * offset was committed gets the message again (always attempt 1 on the main
 * topic) and sends a second copy of the same attempt: a second chain, which
 * would go on to a second parked copy. Every copy of an event carries its
 * origin and is keyed like it, so all the chains of one event run through one
 * retry partition, read by one member at a time. The guard remembers, per
 * origin, the highest attempt this member has settled from the retry topic;
 * a copy at or below it (or below another copy of its origin in the same
 * chunk) is a fork or a copy sent twice and is dropped: committed past,
 * neither processed nor copied. The chain that is furthest on goes on.
 *
 * What it cannot do: a member that takes the partition over starts with an
 * empty memory, so forks that were all still ahead of the committed offset
 * each run one more step before the highest of them wins; and the crash
 * redeliveries on the main topic are still not counted by maxDeliveries.
 * Both need the count kept in the store, by origin (see docs/kafka.md).
 * `limit` bounds the memory: the origins settled longest ago are forgotten.
 */
export function chainGuard({ limit = 100_000 } = {}) {
  const highest = new Map(); // origin -> the highest attempt settled, oldest first
  return {
    /** For each message of a retry-topic chunk, whether to settle it (false: a fork or a copy already settled). */
    fresh(topic, partition, messages) {
      const best = new Map();
      for (const message of messages) {
        const origin = originOf(topic, partition, message);
        best.set(origin, Math.max(best.get(origin) ?? 0, attemptOf(message)));
      }
      const kept = new Set();
      return messages.map((message) => {
        const origin = originOf(topic, partition, message);
        const attempt = attemptOf(message);
        if (attempt <= (highest.get(origin) ?? 0) || attempt < best.get(origin) || kept.has(origin)) return false;
        kept.add(origin);
        return true;
      });
    },
    /** Once `messages` are settled (the store committed, their copies acknowledged): remembers their attempts. */
    settled(topic, partition, messages) {
      for (const message of messages) {
        const origin = originOf(topic, partition, message);
        const attempt = Math.max(highest.get(origin) ?? 0, attemptOf(message));
        highest.delete(origin);
        highest.set(origin, attempt);
        if (highest.size > limit) highest.delete(highest.keys().next().value);
      }
    },
    /** How many origins it remembers. */
    get size() {
      return highest.size;
    },
  };
}

/** When a retry copy is due (0 for a message without the header: due now). */
export function notBeforeOf(message) {
  const at = Number(headerText(message, HEADERS.notBefore) ?? 0);
  return Number.isFinite(at) ? at : 0;
}

/** An eachBatch for consumer.run({ autoCommit: false, eachBatchAutoResolve: false }): `settle(topic, partition, messages)` per chunk. */
export function inChunks({ size, retryTopic, settle }) {
  return async ({ batch, resolveOffset, heartbeat, commitOffsetsIfNecessary, uncommittedOffsets, isRunning, isStale, pause }) => {
    const { topic, partition } = batch;
    for (let start = 0; start < batch.messages.length; start += size) {
      if (!isRunning() || isStale()) return; // stopping, or rebalanced away: what is unresolved is fetched again
      let chunk = batch.messages.slice(start, start + size);
      let waitMs = 0;
      if (topic === retryTopic) {
        // Copies are appended roughly in the order they fall due: take the due prefix, wait for the rest.
        const now = Date.now();
        const early = chunk.findIndex((message) => notBeforeOf(message) > now);
        if (early >= 0) {
          waitMs = notBeforeOf(chunk[early]) - now;
          chunk = chunk.slice(0, early);
        }
      }
      if (chunk.length > 0) {
        await settle(topic, partition, chunk);
        resolveOffset(chunk[chunk.length - 1].offset);
        await commitOffsetsIfNecessary(uncommittedOffsets()); // the settled prefix, nothing past it
      }
      await heartbeat();
      if (waitMs > 0) {
        const resume = pause();
        setTimeout(resume, waitMs).unref();
        return;
      }
    }
  };
}
