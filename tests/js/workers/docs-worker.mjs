// What the tests that run a docs page's worker block as written share
// (kafka-docs.test.mjs, rabbitmq-docs.test.mjs): the block taken from the
// page without its imports (the test hands in what they import), a bounded
// poll, and a delivery handler that records each verdict it gives.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createDeliveryHandler } from 'idemflow';

export const AsyncFunction = (async () => {}).constructor;
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves once `done()` is true, polling; rejects after `ms`. */
export async function until(what, done, ms) {
  const deadline = Date.now() + ms;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(100);
  }
}

/**
 * The js block of docs/`page` that contains `marker`, after checking that it
 * imports exactly `imports` (whole lines), with its import lines left out.
 */
export function docsBlock(page, marker, imports) {
  const text = fs.readFileSync(new URL(`../../../docs/${page}`, import.meta.url), 'utf8');
  const block = [...text.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((code) => code.includes(marker));
  assert.ok(block, `docs/${page} has a js block with ${marker}`);
  for (const line of imports) assert.ok(block.split('\n').includes(line), `the block imports: ${line}`);
  return block.replace(/^import .*$/gm, '');
}

/**
 * createDeliveryHandler's stand-in for a block: the same handler, whose
 * `batch` pushes onto `verdicts` what it answered for each message (its body,
 * attempt, action, outcome and error code).
 */
export function recordingHandler(verdicts) {
  return (...args) => {
    const handle = createDeliveryHandler(...args);
    const recording = (message, context) => handle(message, context);
    recording.batch = async (messages, context) => {
      const answers = await handle.batch(messages, context);
      answers.forEach((verdict, i) => {
        verdicts.push({
          body: Buffer.from(messages[i]).toString('utf8'),
          attempt: context.attempts[i],
          action: verdict.action,
          outcome: verdict.outcome ?? null,
          code: verdict.error?.code ?? null,
        });
      });
      return answers;
    };
    return recording;
  };
}

/**
 * The late swap of a docs-worker test, from the verdicts its event got: retried on
 * UNKNOWN_WORKFLOW, each delivery the next attempt (1 from `first`, then the retry copies), until
 * the swap existed, then applied and exchanged; never parked.
 */
export async function assertLateSwapExchanged(lateVerdicts, store, first) {
  const retries = lateVerdicts.slice(0, -1);
  assert.ok(retries.length >= 1);
  assert.deepEqual(
    retries.map((v) => [v.action, v.code]),
    retries.map(() => ['retry', 'UNKNOWN_WORKFLOW']),
  );
  assert.deepEqual(
    lateVerdicts.map((v) => v.attempt),
    lateVerdicts.map((_, i) => i + 1),
    `delivery 1 from the ${first}, then 2, 3, … from the retry copies`,
  );
  assert.deepEqual([lateVerdicts.at(-1).action, lateVerdicts.at(-1).outcome], ['ack', 'applied']);
  assert.equal((await store.getWorkflow('swap-1')).status, 'exchange', 'the late swap is exchanged');
  assert.equal((await store.getOperation('start-exchange:swap-1'))?.type, 'START_EXCHANGE');
}
