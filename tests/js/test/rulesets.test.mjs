// Rule sets through the installed package: every cell of deposit-swap v1's,
// v2's and v3's tables (v3, the default, with newer, re-published and older
// observations) through processEvent, the lifecycle stories, and the verifier.

import assert from 'node:assert/strict';
import test from 'node:test';
import { decide, fingerprint, IdemflowError, InMemoryStore, processEvent, RuleSet, verifyRuleSet } from 'idemflow';
import { WATCHER_SEQUENCE } from '../workers/fixtures.mjs';

const depositSwap = RuleSet.builtin('deposit-swap');
const orderShipment = RuleSet.builtin('order-shipment');

const recorded = { depositRef: 'btc-mainnet:tx-abc:vout-0', amountUnits: '12500000', payoutUnits: '4100000000', payoutRef: 'payout-9' };
const eventFields = {
  DEPOSIT_DETECTED: { depositRef: recorded.depositRef, amountUnits: recorded.amountUnits },
  DEPOSIT_CONFIRMED: { depositRef: recorded.depositRef, amountUnits: recorded.amountUnits },
  EXCHANGE_COMPLETED: { payoutUnits: recorded.payoutUnits },
  PAYOUT_CONFIRMED: { payoutRef: recorded.payoutRef },
  DEADLINE_PASSED: {},
  DEPOSIT_REVERSED: { depositRef: recorded.depositRef, amountUnits: recorded.amountUnits },
};

// The expected tables, written out by hand from the issues (not read from the rule sets).
const UW = { error: 'UNKNOWN_WORKFLOW', disposition: 'retry' };
const IT = { error: 'INVALID_TRANSITION', disposition: 'reconcile' };
const AA = { outcome: 'already-applied' };
const ST = { outcome: 'stale' };
const to = (status, ...operations) => ({ outcome: 'applied', status, operations });
/**
 * A v3 cell answered by the observation's number: `newer` when its sequence
 * is above the recorded one, `same` when it is the recorded one (a
 * re-publication), `older` (`same` unless given) below it.
 */
const byNumber = (newer, same, older = same) => ({ byNumber: true, newer, same, older });
const REVIEW = 'OPEN_REVIEW:open-review:swap-1';
const EXCHANGE = 'START_EXCHANGE:start-exchange:swap-1';
const PAYOUT = 'SEND_PAYOUT:send-payout:swap-1';
// v3's review of one deposit (its ref escaped: ':' → %3A).
const DEPOSIT_REVIEW = 'REVIEW_DEPOSIT:review-deposit:btc-mainnet%3Atx-abc%3Avout-0:swap-1';
// Where deposit-swap v2 and v3 guard the event's fields against the recorded ones.
const DEPOSIT_GUARDS = {
  DEPOSIT_DETECTED: ['deposit', 'exchange', 'sending', 'success', 'reversed', 'review'],
  DEPOSIT_CONFIRMED: ['deposit', 'exchange', 'sending', 'success', 'reversed', 'review'],
  EXCHANGE_COMPLETED: ['sending', 'success'],
  PAYOUT_CONFIRMED: ['success'],
  DEPOSIT_REVERSED: ['deposit', 'exchange', 'sending', 'success', 'reversed', 'review'],
};

const tables = {
  // v1: in-order delivery per workflow only.
  1: {
    ruleSet: RuleSet.builtin('deposit-swap', { version: 1 }),
    expected: {
      DEPOSIT_DETECTED: {
        '(none)': UW,
        waiting: to('deposit'),
        deposit: AA,
        exchange: AA,
        sending: AA,
        success: AA,
        overdue: to('review', REVIEW),
        review: AA,
      },
      DEPOSIT_CONFIRMED: {
        '(none)': UW,
        waiting: IT,
        deposit: to('exchange', EXCHANGE),
        exchange: AA,
        sending: AA,
        success: AA,
        overdue: IT,
        review: IT,
      },
      EXCHANGE_COMPLETED: {
        '(none)': UW,
        waiting: IT,
        deposit: IT,
        exchange: to('sending', PAYOUT),
        sending: AA,
        success: AA,
        overdue: IT,
        review: IT,
      },
      PAYOUT_CONFIRMED: {
        '(none)': UW,
        waiting: IT,
        deposit: IT,
        exchange: IT,
        sending: to('success'),
        success: AA,
        overdue: IT,
        review: IT,
      },
      DEADLINE_PASSED: {
        '(none)': UW,
        waiting: to('overdue'),
        deposit: ST,
        exchange: ST,
        sending: ST,
        success: ST,
        overdue: ST,
        review: ST,
      },
      DEPOSIT_REVERSED: {
        '(none)': UW,
        waiting: ST,
        deposit: to('waiting'),
        exchange: to('review', REVIEW),
        sending: to('review', REVIEW),
        success: to('review', REVIEW),
        overdue: ST,
        review: IT,
      },
    },
    // Cells whose answer is guarded by the recorded fields the event carries.
    guarded: {
      DEPOSIT_DETECTED: ['deposit', 'exchange', 'sending', 'success', 'review'],
      DEPOSIT_CONFIRMED: ['deposit', 'exchange', 'sending', 'success'],
      EXCHANGE_COMPLETED: ['sending', 'success'],
      PAYOUT_CONFIRMED: ['success'],
      DEPOSIT_REVERSED: ['deposit', 'exchange', 'sending', 'success'],
    },
  },
  // v2: reorder-safe. A confirmation implies its detection; a reversal is final
  // for its deposit (status reversed); after the deadline any deposit event is a
  // person's; after a reversal in review, money events are stale.
  2: {
    ruleSet: RuleSet.builtin('deposit-swap', { version: 2 }),
    expected: {
      DEPOSIT_DETECTED: {
        '(none)': UW,
        waiting: to('deposit'),
        deposit: AA,
        exchange: AA,
        sending: AA,
        success: AA,
        overdue: to('review', REVIEW),
        reversed: ST,
        review: AA,
      },
      DEPOSIT_CONFIRMED: {
        '(none)': UW,
        waiting: to('exchange', EXCHANGE),
        deposit: to('exchange', EXCHANGE),
        exchange: AA,
        sending: AA,
        success: AA,
        overdue: to('review', REVIEW),
        reversed: ST,
        review: AA,
      },
      EXCHANGE_COMPLETED: {
        '(none)': UW,
        waiting: IT,
        deposit: IT,
        exchange: to('sending', PAYOUT),
        sending: AA,
        success: AA,
        overdue: IT,
        reversed: IT,
        review: ST,
      },
      PAYOUT_CONFIRMED: {
        '(none)': UW,
        waiting: IT,
        deposit: IT,
        exchange: IT,
        sending: to('success'),
        success: AA,
        overdue: IT,
        reversed: IT,
        review: ST,
      },
      DEADLINE_PASSED: {
        '(none)': UW,
        waiting: to('overdue'),
        deposit: ST,
        exchange: ST,
        sending: ST,
        success: ST,
        overdue: ST,
        reversed: ST,
        review: ST,
      },
      DEPOSIT_REVERSED: {
        '(none)': UW,
        waiting: to('reversed'),
        deposit: to('reversed'),
        exchange: to('review', REVIEW),
        sending: to('review', REVIEW),
        success: to('review', REVIEW),
        overdue: to('review', REVIEW),
        reversed: AA,
        review: AA,
      },
    },
    guarded: DEPOSIT_GUARDS,
  },
  // v3, the default: deposit events are the chain watcher's numbered observations
  // of each deposit (here one deposit, without an expectedUnits: it covers).
  // A newer one (a higher sequence than its deposit's entry in `deposits`)
  // moves the swap, the same number again (a re-publication) is
  // already-applied, an older one stale: before the exchange a newer word is
  // followed (a re-inclusion after a reversal is exchanged), after it a person
  // decides, in review the latest word is recorded.
  3: {
    ruleSet: RuleSet.builtin('deposit-swap', { version: 3 }),
    expected: {
      DEPOSIT_DETECTED: {
        '(none)': UW,
        waiting: to('deposit'),
        deposit: byNumber(to('deposit'), AA, ST),
        exchange: byNumber(to('review', REVIEW), AA, ST),
        sending: byNumber(to('review', REVIEW), AA, ST),
        success: byNumber(to('review', REVIEW), AA, ST),
        overdue: to('review', REVIEW),
        reversed: byNumber(to('deposit'), AA, ST),
        review: byNumber(to('review'), AA, ST),
      },
      DEPOSIT_CONFIRMED: {
        '(none)': UW,
        waiting: to('exchange', EXCHANGE),
        deposit: byNumber(to('exchange', EXCHANGE), AA, ST),
        exchange: byNumber(to('review', REVIEW), AA, ST),
        sending: byNumber(to('review', REVIEW), AA, ST),
        success: byNumber(to('review', REVIEW), AA, ST),
        // A deposit confirmed after the deadline: a person decides, and the deposit gets its own review.
        overdue: to('review', REVIEW, DEPOSIT_REVIEW),
        reversed: byNumber(to('exchange', EXCHANGE), AA, ST),
        review: byNumber(to('review'), AA, ST),
      },
      EXCHANGE_COMPLETED: {
        '(none)': UW,
        waiting: IT,
        deposit: IT,
        exchange: to('sending', PAYOUT),
        sending: AA,
        success: AA,
        overdue: IT,
        reversed: IT,
        review: ST,
      },
      PAYOUT_CONFIRMED: {
        '(none)': UW,
        waiting: IT,
        deposit: IT,
        exchange: IT,
        sending: to('success'),
        success: AA,
        overdue: IT,
        reversed: IT,
        review: ST,
      },
      DEADLINE_PASSED: {
        '(none)': UW,
        waiting: to('overdue'),
        deposit: ST,
        exchange: ST,
        sending: ST,
        success: ST,
        overdue: ST,
        reversed: ST,
        review: ST,
      },
      DEPOSIT_REVERSED: {
        '(none)': UW,
        waiting: to('reversed'),
        deposit: byNumber(to('reversed'), AA, ST),
        exchange: byNumber(to('review', REVIEW), AA, ST),
        sending: byNumber(to('review', REVIEW), AA, ST),
        success: byNumber(to('review', REVIEW), AA, ST),
        overdue: to('review', REVIEW),
        reversed: byNumber(to('reversed'), AA, ST),
        review: byNumber(to('review'), AA, ST),
      },
    },
    // The amount is guarded against the deposit's entry; another depositRef is another deposit (tests/js/test/chains.test.mjs).
    guarded: DEPOSIT_GUARDS,
    guardedFields: { depositRef: false },
    facts: true,
    // The number of the observation the swap acted on to reach each status: detected (1);
    // confirmed (2); detected, then reversed (2); detected, confirmed, reversed after the
    // exchange started (3). A swap in waiting or overdue has seen no observation.
    sequenceIn: { deposit: 1, exchange: 2, sending: 2, success: 2, reversed: 2, review: 3 },
  },
};

// The observation each status's deposit entry holds under v3 (`sequenceIn` says its number).
const LATEST_WORD = {
  deposit: 'DEPOSIT_DETECTED',
  exchange: 'DEPOSIT_CONFIRMED',
  sending: 'DEPOSIT_CONFIRMED',
  success: 'DEPOSIT_CONFIRMED',
  reversed: 'DEPOSIT_REVERSED',
  review: 'DEPOSIT_REVERSED',
};
const ACTED_ON = new Set(['exchange', 'sending', 'success', 'review']);

/**
 * A swap in `status` as the rule set stores it. Under v1 and v2 the deposit's
 * fields (and v2's sequence) are recorded on the swap. Under v3 (`facts`)
 * the deposit lives in the deposits map, its latest word numbered `sequence`;
 * once the swap acted on it (the exchange started, or a review opened) it is
 * also recorded on the swap; in waiting or overdue there is none.
 */
function storeIn(status, sequence, { facts = false } = {}) {
  if (status === '(none)') return new InMemoryStore([]);
  if (!facts)
    return new InMemoryStore([{ id: 'swap-1', status, revision: 7, ...recorded, ...(sequence === undefined ? {} : { sequence }) }]);
  const { depositRef, amountUnits, ...others } = recorded;
  const workflow = { id: 'swap-1', status, revision: 7, ...others };
  if (sequence !== undefined) workflow.deposits = { [depositRef]: { event: LATEST_WORD[status], amountUnits, sequence } };
  if (ACTED_ON.has(status)) Object.assign(workflow, { depositRef, amountUnits, sequence });
  return new InMemoryStore([workflow]);
}

// Deposit events carry the chain watcher's `sequence` of one that detected, confirmed, then saw a reversal.
function eventOf(type, overrides = {}) {
  const sequence = type in WATCHER_SEQUENCE ? { sequence: WATCHER_SEQUENCE[type] } : {};
  return { eventId: `evt-${type}`, workflowId: 'swap-1', type, ...eventFields[type], ...sequence, ...overrides };
}

async function outcomeOf(promise) {
  try {
    return await promise;
  } catch (error) {
    if (!(error instanceof IdemflowError)) throw error;
    return { error: error.code, disposition: error.disposition, details: error.details };
  }
}

/**
 * The deliveries that exercise one cell: the event as eventOf() numbers it, or, for a cell
 * answered by the observation's number, one newer than the recorded number, one with the
 * same number (a re-publication) and, where there is one, an older one.
 */
function deliveriesOf(answer, recordedSequence) {
  if (!answer.byNumber) return [{ label: '', fields: {}, answer }];
  const deliveries = [
    {
      label: `, sequence ${recordedSequence + 1} over ${recordedSequence}`,
      fields: { sequence: recordedSequence + 1 },
      answer: answer.newer,
    },
    { label: `, sequence ${recordedSequence} over ${recordedSequence}`, fields: { sequence: recordedSequence }, answer: answer.same },
  ];
  if (recordedSequence > 1) {
    deliveries.push({
      label: `, sequence ${recordedSequence - 1} over ${recordedSequence}`,
      fields: { sequence: recordedSequence - 1 },
      answer: answer.older,
    });
  }
  return deliveries;
}

/** A reported answer as the expected tables write it: an applied one by its target status, any other whole. */
const shapeOf = (answer) => (answer.outcome === 'applied' ? { outcome: 'applied', to: answer.to } : answer);

const describe = (answer) => `${answer.error ?? answer.outcome}${answer.status ? ` ${answer.status}` : ''}`;

for (const [version, { ruleSet, expected, guarded, guardedFields = {}, facts = false, sequenceIn = {} }] of Object.entries(tables)) {
  const label = `deposit-swap v${version}`;
  for (const [type, row] of Object.entries(expected)) {
    for (const [status, cell] of Object.entries(row)) {
      const stored = sequenceIn[status];
      for (const { label: numbers, fields, answer } of deliveriesOf(cell, stored)) {
        test(`${label}: ${type} in ${status}${numbers} → ${describe(answer)}`, async () => {
          const store = storeIn(status, stored, { facts });
          const event = eventOf(type, fields);
          const result = await outcomeOf(processEvent(store, event, { ruleSet }));
          const { workflows, inbox, outbox } = store.snapshot();
          if (answer.error) {
            assert.equal(result.error, answer.error);
            assert.equal(result.disposition, answer.disposition);
            assert.equal(inbox.size, 0, 'an error records no receipt');
            return;
          }
          assert.equal(result.outcome, answer.outcome);
          assert.equal(inbox.get(`evt-${type}`).outcome, answer.outcome);
          const after = workflows.get('swap-1');
          if (answer.outcome === 'applied') {
            assert.equal(after.status, answer.status);
            assert.equal(after.revision, 8);
            assert.equal(result.revision, 8);
            assert.deepEqual(
              [...outbox.values()].map((op) => `${op.type}:${op.id}`),
              answer.operations,
            );
            assert.deepEqual(
              result.operationIds,
              answer.operations.map((o) => o.split(':').slice(1).join(':')),
            );
          } else {
            assert.equal(after.status, status);
            assert.equal(after.revision, 7);
            assert.equal(outbox.size, 0);
          }
          if (facts) {
            // v3 records every deposit observation it applies in the deposit's entry, and only those;
            // on the swap, the number of what starts the exchange or of a newer word on the deposit it acted on.
            const applied = answer.outcome === 'applied' && type in WATCHER_SEQUENCE;
            const entry = after.deposits?.[recorded.depositRef];
            // The entry lists the per-deposit operations emitted for it (a review of the deposit).
            const perDeposit = (answer.operations ?? []).includes(DEPOSIT_REVIEW) ? { operations: ['review-deposit'] } : {};
            if (applied)
              assert.deepEqual(entry, { event: type, amountUnits: recorded.amountUnits, sequence: event.sequence, ...perDeposit });
            else assert.equal(entry?.sequence, stored);
            const acts = applied && (answer.operations.includes(EXCHANGE) || ACTED_ON.has(status));
            assert.equal(after.sequence, acts ? event.sequence : ACTED_ON.has(status) ? stored : undefined);
          }
        });
      }
    }
  }

  for (const [type, statuses] of Object.entries(guarded)) {
    for (const status of statuses) {
      for (const field of Object.keys(eventFields[type]).filter((f) => guardedFields[f] !== false)) {
        test(`${label}: ${type} in ${status} with another ${field} is IDENTITY_MISMATCH`, async () => {
          const stored = sequenceIn[status];
          const store = storeIn(status, stored, { facts });
          const changed = field.endsWith('Units') ? '999' : 'other-ref';
          // Where the answer depends on the number, the observation is a newer one: the guard comes first.
          const newer = expected[type][status].byNumber ? { sequence: stored + 1 } : {};
          const result = await outcomeOf(processEvent(store, eventOf(type, { [field]: changed, ...newer }), { ruleSet }));
          assert.equal(result.error, 'IDENTITY_MISMATCH');
          assert.equal(result.details.field, field);
          assert.equal(result.details.recorded, recorded[field]);
          assert.equal(result.details.actual, changed);
          assert.equal(store.snapshot().inbox.size, 0);
        });
      }
    }
  }

  test(`${label}: the table the rule set reports has exactly the expected answers`, () => {
    const reported = (answer) => {
      if (answer.error) return { error: answer.error, disposition: answer.disposition };
      if (answer.outcome === 'applied') return { outcome: 'applied', to: answer.status };
      return { outcome: answer.outcome };
    };
    // A `when` is one condition or a list of them (a list's first element is an array or an object).
    const conditionsOf = (when) => (when === undefined ? [] : typeof when[0] === 'object' ? when : [when]);
    const holds = (c, condition) => conditionsOf(c.when).some((x) => JSON.stringify(x) === JSON.stringify(condition));
    for (const row of ruleSet.table()) {
      for (const status of row.statuses) {
        const answer = expected[row.event][status];
        const where = `${row.event}/${status}`;
        if (row.answer.cases) {
          // A decision list (v3's deposit rows). For one deposit, no other deposit's entry and nothing emitted for it
          // ({ other } and { emitted } conditions fail): the first such case on a newer number answers `newer`, the first
          // on the same number `same`, the last (no condition) `older`; a cell not answered by number, the first.
          const cases = row.answer.cases.filter((c) => !conditionsOf(c.when).some((x) => !Array.isArray(x)));
          const first = (condition) => cases.find((c) => holds(c, condition));
          if (answer.byNumber) {
            assert.deepEqual(shapeOf(first(['sequence', '>', 'sequence']).then), reported(answer.newer), `${where} newer`);
            assert.deepEqual(shapeOf(first(['sequence', '=', 'sequence']).then), reported(answer.same), `${where} same`);
            assert.deepEqual(shapeOf(cases.at(-1).then), reported(answer.older), `${where} older`);
          } else {
            assert.deepEqual(shapeOf(cases[0].then), reported(answer), where);
          }
        } else if (answer.byNumber) {
          assert.deepEqual(row.answer.when, ['sequence', '>', 'sequence'], where);
          assert.deepEqual(shapeOf(row.answer.then), reported(answer.newer), `${where} then`);
          assert.deepEqual(shapeOf(row.answer.else), reported(answer.same), `${where} else`);
        } else {
          assert.equal(row.answer.when, undefined, where);
          assert.deepEqual(shapeOf(row.answer), reported(answer), where);
        }
      }
    }
    const cells = ruleSet.table().reduce((n, row) => n + row.statuses.length, 0);
    assert.equal(cells, 6 * Object.keys(expected.DEPOSIT_DETECTED).length);
  });
}

// The stories below run on the default rule set, deposit-swap v3, unless they name a version.
async function run(store, type, eventId, fields = {}, ruleSet = depositSwap) {
  return processEvent(store, eventOf(type, { eventId, ...fields }), { ruleSet });
}

/** What every result of run() also says: one cycle (no race in these tests) and the event's fingerprint. */
function measured(type, eventId, fields = {}, ruleSet = depositSwap) {
  return { attempts: 1, fingerprint: fingerprint(eventOf(type, { eventId, ...fields }), { ruleSet }) };
}

test('the full happy path goes waiting → deposit → exchange → sending → success', async () => {
  const store = new InMemoryStore([{ id: 'swap-1', status: 'waiting', revision: 0 }]);
  const steps = [
    ['DEPOSIT_DETECTED', 'deposit', []],
    ['DEPOSIT_CONFIRMED', 'exchange', ['start-exchange:swap-1']],
    ['EXCHANGE_COMPLETED', 'sending', ['send-payout:swap-1']],
    ['PAYOUT_CONFIRMED', 'success', []],
  ];
  for (const [i, [type, status, operations]] of steps.entries()) {
    const result = await run(store, type, `e${i}`);
    assert.deepEqual(result, {
      outcome: 'applied',
      status,
      revision: i + 1,
      operationIds: operations,
      operationId: operations[0] ?? null,
      ...measured(type, `e${i}`),
    });
  }
  const { workflows, outbox } = store.snapshot();
  // The swap keeps the deposit it exchanged, with the number of its confirmation, and its entry in deposits.
  assert.deepEqual(workflows.get('swap-1'), {
    id: 'swap-1',
    status: 'success',
    revision: 4,
    ...recorded,
    sequence: WATCHER_SEQUENCE.DEPOSIT_CONFIRMED,
    deposits: {
      [recorded.depositRef]: {
        event: 'DEPOSIT_CONFIRMED',
        amountUnits: recorded.amountUnits,
        sequence: WATCHER_SEQUENCE.DEPOSIT_CONFIRMED,
      },
    },
  });
  assert.equal(outbox.get('send-payout:swap-1').payload.payoutUnits, recorded.payoutUnits);
  assert.deepEqual(outbox.get('start-exchange:swap-1').payload, { depositRef: recorded.depositRef, amountUnits: recorded.amountUnits });
});

test('a late deposit goes to review, never to exchange', async () => {
  const store = new InMemoryStore([{ id: 'swap-1', status: 'waiting', revision: 0 }]);
  assert.equal((await run(store, 'DEADLINE_PASSED', 'd1')).status, 'overdue');
  const late = await run(store, 'DEPOSIT_DETECTED', 'd2');
  assert.deepEqual([late.status, late.operationIds], ['review', ['open-review:swap-1']]);
  // Its confirmation, a newer observation, is recorded and the confirmed deposit gets its own review, once,
  // as it would had it opened the review itself (so the order of the two does not matter).
  const review = 'review-deposit:btc-mainnet%3Atx-abc%3Avout-0:swap-1';
  const confirm = await run(store, 'DEPOSIT_CONFIRMED', 'd3');
  assert.deepEqual(confirm, {
    outcome: 'applied',
    status: 'review',
    revision: 3,
    operationIds: [review],
    operationId: review,
    ...measured('DEPOSIT_CONFIRMED', 'd3'),
  });
  const { workflows, outbox } = store.snapshot();
  assert.equal(workflows.get('swap-1').deposits[recorded.depositRef].sequence, WATCHER_SEQUENCE.DEPOSIT_CONFIRMED);
  assert.deepEqual([...outbox.keys()], ['open-review:swap-1', review]);
  assert.equal(
    await outcomeOf(run(store, 'DEPOSIT_CONFIRMED', 'd4')).then((r) => r.outcome),
    'already-applied',
    're-published, no second review',
  );
});

test('a reversal before the exchange holds until the chain says something newer: older observations are stale', async () => {
  const store = new InMemoryStore([{ id: 'swap-1', status: 'waiting', revision: 0 }]);
  await run(store, 'DEPOSIT_DETECTED', 'r1');
  assert.equal((await run(store, 'DEPOSIT_REVERSED', 'r2')).status, 'reversed');
  // Before the exchange the deposit lives only in the deposits map: its latest word, amount and number.
  assert.deepEqual(store.snapshot().workflows.get('swap-1'), {
    id: 'swap-1',
    status: 'reversed',
    revision: 2,
    deposits: {
      [recorded.depositRef]: { event: 'DEPOSIT_REVERSED', amountUnits: recorded.amountUnits, sequence: WATCHER_SEQUENCE.DEPOSIT_REVERSED },
    },
  });
  // The reversed deposit's confirmation (emitted before the reversal, delivered after it) and a
  // re-published detection carry older numbers and change nothing.
  assert.deepEqual(await run(store, 'DEPOSIT_CONFIRMED', 'r3'), { outcome: 'stale', ...measured('DEPOSIT_CONFIRMED', 'r3') });
  assert.deepEqual(await run(store, 'DEPOSIT_DETECTED', 'r4'), { outcome: 'stale', ...measured('DEPOSIT_DETECTED', 'r4') });
  assert.equal(store.snapshot().outbox.size, 0);
  // The transaction mined again: the watcher's next word about the deposit revives it.
  const reincluded = await run(store, 'DEPOSIT_DETECTED', 'r6', { sequence: 4 });
  assert.deepEqual(reincluded, {
    outcome: 'applied',
    status: 'deposit',
    revision: 3,
    operationIds: [],
    operationId: null,
    ...measured('DEPOSIT_DETECTED', 'r6', { sequence: 4 }),
  });
  assert.equal(store.snapshot().workflows.get('swap-1').deposits[recorded.depositRef].sequence, 4);
  // Another deposit on the swap is recorded beside it (numbered on its own), not a mismatch.
  const other = 'btc-mainnet:tx-def:vout-1';
  assert.equal((await run(store, 'DEPOSIT_DETECTED', 'r7', { depositRef: other, sequence: 1 })).status, 'deposit');
  assert.deepEqual(Object.keys(store.snapshot().workflows.get('swap-1').deposits).sort(), [recorded.depositRef, other]);
  assert.equal(store.snapshot().outbox.size, 0);
});

test('a reversal before the exchange is final for its deposit (v2)', async () => {
  const ruleSet = RuleSet.builtin('deposit-swap', { version: 2 });
  const store = new InMemoryStore([{ id: 'swap-1', status: 'waiting', revision: 0 }]);
  const v2 = (type, eventId, fields = {}) => run(store, type, eventId, fields, ruleSet);
  await v2('DEPOSIT_DETECTED', 'r1');
  assert.equal((await v2('DEPOSIT_REVERSED', 'r2')).status, 'reversed');
  assert.deepEqual(store.snapshot().workflows.get('swap-1'), {
    id: 'swap-1',
    status: 'reversed',
    revision: 2,
    depositRef: recorded.depositRef,
    amountUnits: recorded.amountUnits,
  });
  // The reversed deposit's confirmation (emitted before the reversal, delivered after it) and a
  // re-published detection change nothing.
  assert.deepEqual(await v2('DEPOSIT_CONFIRMED', 'r3'), { outcome: 'stale', ...measured('DEPOSIT_CONFIRMED', 'r3', {}, ruleSet) });
  assert.deepEqual(await v2('DEPOSIT_DETECTED', 'r4'), { outcome: 'stale', ...measured('DEPOSIT_DETECTED', 'r4', {}, ruleSet) });
  // Another deposit on the swap is a person's decision.
  assert.equal((await outcomeOf(v2('DEPOSIT_DETECTED', 'r5', { depositRef: 'btc-mainnet:tx-def:vout-1' }))).error, 'IDENTITY_MISMATCH');
  assert.equal(store.snapshot().outbox.size, 0);
});

test('a reversal before the exchange returns the workflow to waiting and clears the deposit (v1)', async () => {
  const ruleSet = RuleSet.builtin('deposit-swap', { version: 1 });
  const store = new InMemoryStore([{ id: 'swap-1', status: 'waiting', revision: 0 }]);
  const v1 = (type, eventId, fields = {}) => processEvent(store, eventOf(type, { eventId, ...fields }), { ruleSet });
  await v1('DEPOSIT_DETECTED', 'r1');
  assert.equal((await v1('DEPOSIT_REVERSED', 'r2')).status, 'waiting');
  assert.deepEqual(store.snapshot().workflows.get('swap-1'), { id: 'swap-1', status: 'waiting', revision: 2 });
  assert.equal((await outcomeOf(v1('DEPOSIT_CONFIRMED', 'r3'))).error, 'INVALID_TRANSITION');
  await v1('DEPOSIT_DETECTED', 'r4', { depositRef: 'btc-mainnet:tx-def:vout-1' });
  assert.equal((await v1('DEPOSIT_CONFIRMED', 'r5', { depositRef: 'btc-mainnet:tx-def:vout-1' })).status, 'exchange');
  assert.equal(store.snapshot().outbox.size, 1);
});

test('a reversal after the exchange started opens a review instead of compensating', async () => {
  const store = new InMemoryStore([{ id: 'swap-1', status: 'waiting', revision: 0 }]);
  await run(store, 'DEPOSIT_DETECTED', 'x1');
  await run(store, 'DEPOSIT_CONFIRMED', 'x2');
  const reversal = await run(store, 'DEPOSIT_REVERSED', 'x3');
  assert.deepEqual([reversal.status, reversal.operationIds], ['review', ['open-review:swap-1']]);
  assert.deepEqual([...store.snapshot().outbox.keys()].sort(), ['open-review:swap-1', 'start-exchange:swap-1']);
  // In review only a newer observation is recorded: the reversal re-published under a new event id is already-applied.
  assert.deepEqual(await run(store, 'DEPOSIT_REVERSED', 'x4'), { outcome: 'already-applied', ...measured('DEPOSIT_REVERSED', 'x4') });
  assert.deepEqual(
    await run(store, 'EXCHANGE_COMPLETED', 'x5'),
    { outcome: 'stale', ...measured('EXCHANGE_COMPLETED', 'x5') },
    'a person decides about the exchange now',
  );
  assert.deepEqual(
    [store.snapshot().workflows.get('swap-1').sequence, store.snapshot().outbox.size],
    [WATCHER_SEQUENCE.DEPOSIT_REVERSED, 2],
  );
});

test('a swap stored without a sequence (under v2) takes numbered observations: any number is newer than none', async () => {
  const store = new InMemoryStore([
    { id: 'swap-1', status: 'deposit', revision: 1, depositRef: recorded.depositRef, amountUnits: recorded.amountUnits },
  ]);
  const confirm = await run(store, 'DEPOSIT_CONFIRMED', 'n1');
  assert.deepEqual(confirm, {
    outcome: 'applied',
    status: 'exchange',
    revision: 2,
    operationIds: ['start-exchange:swap-1'],
    operationId: 'start-exchange:swap-1',
    ...measured('DEPOSIT_CONFIRMED', 'n1'),
  });
  assert.equal(store.snapshot().workflows.get('swap-1').sequence, WATCHER_SEQUENCE.DEPOSIT_CONFIRMED);
  assert.deepEqual(
    await run(store, 'DEPOSIT_CONFIRMED', 'n2'),
    { outcome: 'already-applied', ...measured('DEPOSIT_CONFIRMED', 'n2') },
    're-published, it carries the number now recorded',
  );
});

test('a deadline racing a detection: deadline first makes the deposit late', async () => {
  const store = new InMemoryStore([{ id: 'swap-1', status: 'waiting', revision: 0 }]);
  assert.equal((await run(store, 'DEADLINE_PASSED', 't1')).status, 'overdue');
  assert.equal((await run(store, 'DEPOSIT_DETECTED', 't2')).status, 'review');
});

test('a deadline racing a detection: detection first makes the deadline stale', async () => {
  const store = new InMemoryStore([{ id: 'swap-1', status: 'waiting', revision: 0 }]);
  assert.equal((await run(store, 'DEPOSIT_DETECTED', 't1')).status, 'deposit');
  assert.deepEqual(await run(store, 'DEADLINE_PASSED', 't2'), { outcome: 'stale', ...measured('DEADLINE_PASSED', 't2') });
  const { workflows, inbox } = store.snapshot();
  assert.equal(workflows.get('swap-1').status, 'deposit');
  assert.equal(workflows.get('swap-1').revision, 1);
  assert.equal(inbox.get('t2').outcome, 'stale');
});

test('order-shipment: the first request creates the workflow and one CREATE_SHIPMENT', async () => {
  const store = new InMemoryStore();
  const request = { eventId: 'evt-1', workflowId: 'order-1', type: 'SHIPMENT_REQUESTED' };
  const first = await processEvent(store, request, { ruleSet: orderShipment });
  const measure = (event) => ({ attempts: 1, fingerprint: fingerprint(event, { ruleSet: orderShipment }) });
  assert.deepEqual(first, {
    outcome: 'applied',
    status: 'shipping',
    revision: 1,
    operationId: 'create-shipment:order-1',
    operationIds: ['create-shipment:order-1'],
    ...measure(request),
  });
  const replay = await processEvent(store, request, { ruleSet: orderShipment });
  // A redelivery answers the shipment the first request scheduled.
  assert.deepEqual(
    { ...replay, original: { ...replay.original, decidedAt: null } },
    {
      outcome: 'duplicate-delivery',
      original: { outcome: 'applied', operationIds: ['create-shipment:order-1'], status: 'shipping', revision: 1, decidedAt: null },
      ...measure(request),
    },
  );
  assert.equal(typeof replay.original.decidedAt, 'number');
  const again = { ...request, eventId: 'evt-2' };
  assert.deepEqual(await processEvent(store, again, { ruleSet: orderShipment }), { outcome: 'already-applied', ...measure(again) });
  const conflict = await outcomeOf(processEvent(store, { ...request, workflowId: 'other-order' }, { ruleSet: orderShipment }));
  assert.equal(conflict.error, 'EVENT_ID_CONFLICT');
  const { workflows, outbox } = store.snapshot();
  assert.deepEqual(workflows.get('order-1'), { id: 'order-1', status: 'shipping', revision: 1 });
  assert.equal(workflows.has('other-order'), false);
  assert.equal(outbox.size, 1);
});

test('order-shipment: concurrent first requests under different ids create one shipment', async () => {
  const store = new InMemoryStore();
  const results = await Promise.all(
    Array.from({ length: 10 }, (_, i) =>
      processEvent(store, { eventId: `evt-${i}`, workflowId: 'order-9', type: 'SHIPMENT_REQUESTED' }, { ruleSet: 'order-shipment' }),
    ),
  );
  assert.equal(results.filter((r) => r.outcome === 'applied').length, 1);
  assert.equal(store.snapshot().outbox.size, 1);
});

test('receipts record the rule set id, version and hash', () => {
  const decision = decide({
    event: eventOf('DEADLINE_PASSED'),
    receipt: null,
    workflow: { id: 'swap-1', status: 'waiting', revision: 0 },
    ruleSet: depositSwap,
  });
  assert.deepEqual(decision.writeSet.receipt.ruleSet, { id: 'deposit-swap', version: 4, hash: depositSwap.hash });
  assert.equal(depositSwap, RuleSet.builtin('deposit-swap', { version: 4 }), 'the default is v4');
});

test('fingerprints cover type, workflowId and the identity fields of the event type', () => {
  const deadline = eventOf('DEADLINE_PASSED');
  assert.equal(
    fingerprint({ ...deadline, eventId: 'other', extra: 'x' }, { ruleSet: depositSwap }),
    fingerprint(deadline, { ruleSet: depositSwap }),
  );
  assert.notEqual(fingerprint(eventOf('DEPOSIT_DETECTED')), fingerprint(eventOf('DEPOSIT_CONFIRMED')));
});

test('the rule-set hash is the same for the same rules in another key order, and changes with a rule', () => {
  // order-shipment, quick to prove (a copy of deposit-swap would be proven twice, seconds each in wasm).
  const definition = orderShipment.definition();
  const reordered = Object.fromEntries(Object.entries(definition).reverse());
  assert.equal(RuleSet.fromJSON(reordered).hash, orderShipment.hash);
  const changed = structuredClone(definition);
  changed.rules.at(-1).description = `${changed.rules.at(-1).description ?? ''} (changed)`;
  const other = RuleSet.fromJSON(changed);
  assert.notEqual(other.hash, orderShipment.hash);
  assert.match(other.hash, /^sha256:[0-9a-f]{64}$/);
});

test('rule sets are compiled once: the same definition gives the same instance', () => {
  const definition = orderShipment.definition();
  assert.equal(RuleSet.fromJSON(definition), RuleSet.fromJSON(JSON.stringify(definition)));
  assert.equal(RuleSet.builtin('deposit-swap'), depositSwap);
});

// A small custom rule set and broken variants, one per verifier property.
function custom() {
  return {
    id: 'ticket',
    version: 1,
    statuses: [
      { name: 'open', initial: true },
      { name: 'closed', terminal: true },
    ],
    fields: [{ name: 'reason', kind: 'text' }],
    events: [{ type: 'CLOSE', fields: ['reason'] }, { type: 'PING' }],
    rules: [
      { on: '*', in: '(none)', then: { error: 'UNKNOWN_WORKFLOW' } },
      {
        on: 'CLOSE',
        in: 'open',
        then: {
          outcome: 'applied',
          to: 'closed',
          record: ['reason'],
          emit: [{ type: 'NOTIFY', id: 'notify:{workflowId}', payload: ['reason'] }],
        },
      },
      { on: 'CLOSE', in: 'closed', guard: ['reason'], then: { outcome: 'already-applied' } },
      { on: 'PING', in: '*', then: { outcome: 'stale' } },
    ],
  };
}

test('a custom rule set verifies and runs through processEvent', async () => {
  const report = verifyRuleSet(custom());
  assert.equal(report.ok, true);
  assert.deepEqual(
    report.properties.map((p) => p.name),
    [
      'one-answer-per-pair',
      'every-status-reachable',
      'terminal-statuses-final',
      'operation-ids-unique',
      'revision-increases',
      'guards-read-recorded-fields',
      'invariants',
      'reorder-safe',
    ],
  );
  const ruleSet = RuleSet.fromJSON(custom());
  const store = new InMemoryStore([{ id: 't-1', status: 'open', revision: 0 }]);
  const close = { eventId: 'c1', workflowId: 't-1', type: 'CLOSE', reason: 'fixed' };
  assert.deepEqual((await processEvent(store, close, { ruleSet })).operationIds, ['notify:t-1']);
  const closeAgain = { ...close, eventId: 'c2' };
  assert.deepEqual(await processEvent(store, closeAgain, { ruleSet }), {
    outcome: 'already-applied',
    attempts: 1,
    fingerprint: fingerprint(closeAgain, { ruleSet }),
  });
  assert.equal((await outcomeOf(processEvent(store, { ...close, eventId: 'c3', reason: 'dup' }, { ruleSet }))).error, 'IDENTITY_MISMATCH');
});

const broken = {
  'one-answer-per-pair (a pair with no answer)': [
    (d) => {
      d.rules = d.rules.filter((r) => r.on !== 'PING');
    },
    (c) => assert.equal(c.event, 'PING'),
  ],
  'one-answer-per-pair (a pair with two answers)': [
    (d) => {
      d.rules.push({ on: 'PING', in: 'open', then: { outcome: 'already-applied' } });
    },
    (c) => assert.deepEqual([c.event, c.status, c.rules], ['PING', 'open', ['rules[3]', 'rules[4]']]),
  ],
  'every-status-reachable': [
    (d) => {
      d.statuses.push({ name: 'limbo' });
      d.rules[3].in = ['open', 'closed', 'limbo'];
      d.rules.push({ on: 'CLOSE', in: 'limbo', then: { error: 'INVALID_TRANSITION' } });
    },
    (c) => assert.deepEqual(c.unreachable, ['limbo']),
  ],
  'terminal-statuses-final': [
    (d) => {
      d.rules[2] = { on: 'CLOSE', in: 'closed', then: { outcome: 'applied', to: 'closed' } };
    },
    (c) =>
      assert.deepEqual(
        c.steps.map((s) => `${s.event}:${s.from}->${s.to}`),
        ['CLOSE:open->closed', 'CLOSE:closed->closed'],
      ),
  ],
  'operation-ids-unique': [
    (d) => {
      d.statuses[1].terminal = false;
      d.rules[2] = { on: 'CLOSE', in: 'closed', then: { outcome: 'applied', to: 'open', clear: ['reason'] } };
    },
    (c) => {
      assert.equal(c.operationId, 'notify:{workflowId}');
      assert.deepEqual(
        c.steps.map((s) => s.event),
        ['CLOSE', 'CLOSE', 'CLOSE'],
      );
    },
  ],
  'revision-increases': [
    (d) => {
      d.rules[1].then.revisionStep = 0;
    },
    (c) =>
      assert.deepEqual(
        c.steps.map((s) => s.rule),
        ['rules[1]'],
      ),
  ],
  'guards-read-recorded-fields': [
    (d) => {
      d.rules[1].then.record = [];
    },
    (c) => {
      assert.equal(c.field, 'reason');
      assert.equal(c.steps.at(-1).rule, 'rules[2]');
    },
  ],
};

for (const [name, [breakIt, checkCounterexample]] of Object.entries(broken)) {
  test(`the verifier finds a broken rule set: ${name}`, () => {
    const definition = custom();
    breakIt(definition);
    const report = verifyRuleSet(definition);
    const property = name.split(' ')[0];
    assert.equal(report.ok, false);
    const failed = report.properties.filter((p) => !p.ok).map((p) => p.name);
    assert.deepEqual(failed, [property]);
    checkCounterexample(report.properties.find((p) => p.name === property).counterexample);
    assert.throws(
      () => RuleSet.fromJSON(definition),
      (error) =>
        error instanceof IdemflowError &&
        error.code === 'RULESET_INVALID' &&
        error.details.path === property &&
        error.details.report.ok === false,
    );
  });
}

test('a malformed definition is RULESET_INVALID with the path of the bad part', () => {
  const cases = [
    [
      (d) => {
        d.rules[1].then.to = 'shut';
      },
      '$.rules[1].then.to',
    ],
    [
      (d) => {
        d.rules[1].then.emit[0].id = 'notify';
      },
      '$.rules[1].then.emit[0].id',
    ],
    [
      (d) => {
        d.events[0].fields = ['reason', 'missing'];
      },
      '$.events[0].fields[1]',
    ],
    [
      (d) => {
        d.rules[0].colour = 'red';
      },
      '$.rules[0].colour',
    ],
    [
      (d) => {
        d.version = 0;
      },
      '$.version',
    ],
    [
      (d) => {
        d.fields[0].kind = 'float';
      },
      '$.fields[0].kind',
    ],
    [
      (d) => {
        d.rules[2].then = { outcome: 'already-applied', to: 'open' };
      },
      '$.rules[2].then.to',
    ],
  ];
  for (const [breakIt, path] of cases) {
    const definition = custom();
    breakIt(definition);
    assert.throws(
      () => verifyRuleSet(definition),
      (error) => error instanceof IdemflowError && error.code === 'RULESET_INVALID' && error.details.path === path,
      path,
    );
  }
});
