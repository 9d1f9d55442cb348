// Production-shaped traffic for the scale runs (test/scale-*.test.mjs,
// bench/production.mjs): the chaos run's swaps (workers/chaos.mjs chaosPlan:
// detections and confirmations, reversals, deadlines, conflicting
// re-publications, duplicates and re-publications under new ids, a few bodies
// that are not events), every swap created before its events, the messages in
// one shuffled order, so that concurrent batches share workflows.

import { random, shuffle } from './broker.mjs';
import { chaosPlan, workflowOf } from './chaos.mjs';

/**
 * `{ workflows, messages: [{ body: Buffer, kind, eventId }], validIds, swaps }` for
 * `swaps` swaps. `events: true` keeps only the messages that are events
 * (`kind` 'event', each with its parsed `event`): no conflicts, no bodies
 * that are not events. `reinclusions`: the chaos plan's share of re-included
 * deposits (0, none, by default: v2 is not reorder-safe for them);
 * `secondDeposits` its share of swaps with a second deposit (0 by default:
 * two covering deposits race, so two runs need not end alike).
 */
export function swapTraffic({
  swaps,
  seed = 1,
  runId = 'scale',
  invalid = Math.ceil(swaps / 40),
  eventsOnly = false,
  reinclusions = 0,
  secondDeposits = 0,
}) {
  const plan = chaosPlan({ swaps, seed, runId, late: 0, invalid: eventsOnly ? 0 : invalid, reinclusions, secondDeposits });
  let messages = plan.messages;
  if (eventsOnly) messages = messages.filter((m) => m.kind === 'event').map((m) => ({ ...m, event: JSON.parse(m.body) }));
  const conflicted = new Set(eventsOnly ? plan.conflicts.keys() : []);
  return {
    workflows: plan.swaps.map(workflowOf),
    messages: shuffle(messages.slice(), random(seed + 7)),
    // The event ids published (the chaos plan's provider answers are not: nothing carries the operations out here).
    validIds: new Set(messages.filter((m) => m.kind !== 'invalid').map((m) => m.eventId)),
    swaps: plan.swaps.filter((swap) => !conflicted.has(swap.id)),
  };
}

/** Creates the workflows through `store`, `chunk` at a time. */
export async function putWorkflows(store, workflows, chunk = 32) {
  for (let i = 0; i < workflows.length; i += chunk) await Promise.all(workflows.slice(i, i + chunk).map((w) => store.putWorkflow(w)));
}

/**
 * Where a run left the tables: every workflow's status, the receipts and the
 * operations counted (two workers that did the same work end the same).
 */
export async function endOf(helper, tables) {
  const rows = await helper.query(`SELECT id, status FROM ${tables.workflows}`, []);
  return {
    statuses: new Map(rows.map((row) => [row.id, row.status])),
    receipts: await helper.count('inbox'),
    operations: await helper.count('outbox'),
  };
}
