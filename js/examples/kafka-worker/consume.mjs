// The consumer side of the Kafka worker, apart from what it does with the
// messages: the group member's settings, and eachBatch taken `size` messages at
// a time, each chunk settled, then its offsets resolved and committed (never
// past what was settled), then a heartbeat. On the retry topic a chunk stops
// at the first copy that is not due yet and the partition pauses until it is.
import { HEADERS, headerText } from './topology.mjs';

/** A group member: heartbeats every 3 s (a third of a shorter session), waits for the others' rejoin twice its session (10 s at least). */
export function createConsumer(kafka, groupId, { sessionTimeoutMs = Number(process.env.SESSION_TIMEOUT_MS || 30_000) } = {}) {
  return kafka.consumer({
    groupId,
    sessionTimeout: sessionTimeoutMs,
    heartbeatInterval: Math.min(3000, Math.floor(sessionTimeoutMs / 3)),
    rebalanceTimeout: Math.max(10_000, 2 * sessionTimeoutMs),
    allowAutoTopicCreation: false,
  });
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
