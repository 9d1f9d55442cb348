// A downstream outage of minutes never leaves an operation dead (issue 34):
// failures that say the downstream is unavailable retry on a time budget
// with their attempt given back, and a per-type circuit breaker stops
// claiming the type meanwhile and probes it. The 200 s outage runs on an
// injected clock the test moves by hand; every loop is bounded by rounds.

import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';
import { createOutboxConsumer, IdemflowError, InMemoryStore, processEvent, RuleSet } from 'idemflow';
import { numberedConfirmation as confirmation, numberedSwap as swap } from '../workers/fixtures.mjs';
import { backends } from '../workers/outbox-backends.mjs';

const T0 = Date.UTC(2026, 0, 1);
const OUTAGE_MS = 200_000;
const COUNT = 20;
const STEP_MS = 1_000;
const MAX_ROUNDS = 2_000;
const SERVED = new Set(['memory', 'sqlite', 'pg', 'mysql']);

function clock(start = T0) {
  const c = { t: start, now: () => c.t, advance: (ms) => (c.t += ms) };
  return c;
}

function refused() {
  return Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:9092'), { code: 'ECONNREFUSED' });
}

/** Runs rounds on the clock, STEP_MS apart, until `done()` or MAX_ROUNDS. */
async function runUntil(consumer, c, done) {
  for (let round = 0; round < MAX_ROUNDS; round += 1) {
    await consumer.runOnce();
    if (await done()) return round;
    c.advance(STEP_MS);
  }
  throw new Error(`not settled within ${MAX_ROUNDS} rounds`);
}

async function countBy(store, status) {
  return (await store.listOperations({ status, limit: 1000 })).length;
}

for (const backend of backends) {
  if (!SERVED.has(backend.id)) continue;
  if (backend.skip) {
    test(`outbox outages on ${backend.name}`, { skip: backend.skip }, () => {});
    continue;
  }
  describe(`outbox outages on ${backend.name}`, { timeout: 120_000 }, () => {
    let env;
    before(async () => {
      env = await backend.setup();
    });
    afterEach(async () => {
      await env?.cleanup();
    });
    after(async () => {
      await env?.close();
    });

    const confirmed = async (c, count = COUNT) => {
      const store = await env.open(
        Array.from({ length: count }, (_, i) => swap(i + 1)),
        c,
      );
      for (let i = 1; i <= count; i += 1) assert.equal((await processEvent(store, confirmation(i))).outcome, 'applied');
      return store;
    };

    test('a 200 s outage leaves 0 operations dead and all done after recovery; the breaker opens, probes and closes', async () => {
      const c = clock();
      const store = await confirmed(c);
      const downUntil = T0 + OUTAGE_MS;
      let callsDuringOutage = 0;
      const consumer = createOutboxConsumer(
        store,
        {
          START_EXCHANGE: async () => {
            if (c.now() < downUntil) {
              callsDuringOutage += 1;
              throw refused();
            }
          },
        },
        { now: c.now, autoRenew: false, maxAttempts: 5, maxDelayMs: 20_000, breakerThreshold: 3, breakerProbeMs: 30_000 },
      );
      const transitions = [];
      for (const name of ['breaker-opened', 'breaker-half-open', 'breaker-closed']) {
        consumer.on(name, ({ type }) => transitions.push(`${name}:${type}`));
      }
      let dead = 0;
      consumer.on('dead', () => {
        dead += 1;
      });
      await runUntil(consumer, c, async () => (await countBy(store, 'done')) === COUNT);
      assert.equal(dead, 0);
      assert.equal(await countBy(store, 'dead'), 0);
      assert.equal(await countBy(store, 'done'), COUNT);
      assert.ok(transitions.includes('breaker-opened:START_EXCHANGE'), transitions.join());
      assert.ok(transitions.includes('breaker-half-open:START_EXCHANGE'), transitions.join());
      assert.equal(transitions.at(-1), 'breaker-closed:START_EXCHANGE');
      assert.deepEqual(consumer.breakers(), {});
      // While open the type costs no attempts: the calls are the first round's and one probe per probe period.
      const probes = transitions.filter((t) => t.startsWith('breaker-half-open')).length;
      assert.ok(probes >= 5 && probes <= Math.ceil(OUTAGE_MS / 30_000) + 1, `probes ${probes}`);
      assert.ok(callsDuringOutage <= 4 + probes, `calls during the outage ${callsDuringOutage}`);
    });

    test('an outage past the budget goes dead with outage-budget', async () => {
      const c = clock();
      const store = await confirmed(c, 2);
      const consumer = createOutboxConsumer(
        store,
        {
          START_EXCHANGE: async () => {
            throw Object.assign(new Error('Service Unavailable'), { status: 503 });
          },
        },
        { now: c.now, autoRenew: false, maxAttempts: 2, maxDelayMs: 2_000, outageBudgetMs: 30_000, breakerThreshold: 0 },
      );
      const reasons = [];
      consumer.on('dead', ({ reason }) => reasons.push(reason));
      const rounds = await runUntil(consumer, c, async () => (await countBy(store, 'dead')) === 2);
      assert.deepEqual(reasons, ['outage-budget', 'outage-budget']);
      assert.ok(rounds * STEP_MS >= 30_000, `dead after ${rounds} rounds`);
    });

    test('a failure that does not say the downstream is unavailable still goes dead by count, and opens no breaker', async () => {
      const c = clock();
      const store = await confirmed(c, 3);
      const consumer = createOutboxConsumer(
        store,
        {
          START_EXCHANGE: async () => {
            throw new Error('amount rejected by the provider');
          },
        },
        { now: c.now, autoRenew: false, maxAttempts: 3, maxDelayMs: 2_000, breakerThreshold: 1 },
      );
      const reasons = [];
      let opened = 0;
      consumer.on('dead', ({ reason }) => reasons.push(reason));
      consumer.on('breaker-opened', () => {
        opened += 1;
      });
      await runUntil(consumer, c, async () => (await countBy(store, 'dead')) === 3);
      assert.deepEqual(reasons, ['max-attempts', 'max-attempts', 'max-attempts']);
      for (const operation of await store.listOperations({ status: 'dead' })) assert.equal(operation.attempts, 3);
      assert.equal(opened, 0);
    });
  });
}

test('what says the downstream is unavailable: socket codes, a fetch cause, 429/503, TimeoutError, unavailable: true', async () => {
  const { describeFailure } = await import('../node_modules/idemflow/outbox/arguments.cjs');
  const says = (thrown) => describeFailure(thrown, false).unavailable;
  assert.equal(says(Object.assign(new Error('x'), { code: 'ECONNRESET' })), true);
  assert.equal(says(Object.assign(new TypeError('fetch failed'), { cause: { code: 'ECONNREFUSED' } })), true);
  assert.equal(says(Object.assign(new Error('x'), { status: 429 })), true);
  assert.equal(says(Object.assign(new Error('x'), { response: { status: 503 } })), true);
  assert.equal(says(new DOMException('timed out', 'TimeoutError')), true);
  assert.equal(says(Object.assign(new Error('x'), { unavailable: true })), true);
  assert.equal(says(Object.assign(new Error('x'), { status: 500 })), false);
  assert.equal(says(new Error('x')), false);
});

describe('the consumer refuses to start when the rule sets it serves emit types it has no handler for', () => {
  const store = new InMemoryStore();
  const noop = async () => {};

  test('the core names what deposit-swap emits', () => {
    assert.deepEqual(RuleSet.builtin('deposit-swap').operationTypes(), ['OPEN_REVIEW', 'REVIEW_DEPOSIT', 'SEND_PAYOUT', 'START_EXCHANGE']);
  });

  test('missing handlers: INVALID_ARGUMENT, fatal, naming the types', () => {
    assert.throws(
      () => createOutboxConsumer(store, { START_EXCHANGE: noop, SEND_PAYOUT: noop }, { ruleSets: ['deposit-swap'] }),
      (error) => {
        assert.ok(error instanceof IdemflowError);
        assert.equal(error.code, 'INVALID_ARGUMENT');
        assert.equal(error.disposition, 'fatal');
        assert.deepEqual(error.details.types, ['OPEN_REVIEW', 'REVIEW_DEPOSIT']);
        assert.match(error.message, /OPEN_REVIEW, REVIEW_DEPOSIT/);
        return true;
      },
    );
  });

  test('types named in ignoreTypes are let through; a name no rule set emits is refused', () => {
    const handlers = { START_EXCHANGE: noop, SEND_PAYOUT: noop };
    const consumer = createOutboxConsumer(store, handlers, {
      ruleSets: [RuleSet.builtin('deposit-swap')],
      ignoreTypes: ['OPEN_REVIEW', 'REVIEW_DEPOSIT'],
    });
    assert.equal(consumer.running, false);
    assert.throws(
      () =>
        createOutboxConsumer(store, handlers, {
          ruleSets: ['deposit-swap'],
          ignoreTypes: ['OPEN_REVIEW', 'REVIEW_DEPOSIT', 'START_EXCHANG'],
        }),
      (error) => error.code === 'INVALID_ARGUMENT' && error.details.field === 'ignoreTypes' && error.details.types[0] === 'START_EXCHANG',
    );
  });

  test('every emitted type handled: it starts', () => {
    const all = Object.fromEntries(
      RuleSet.builtin('deposit-swap')
        .operationTypes()
        .map((type) => [type, noop]),
    );
    assert.doesNotThrow(() => createOutboxConsumer(store, all, { ruleSets: ['deposit-swap'] }));
  });
});

test("docs/kafka.md's relay block runs as written: every type the rule set emits is relayed", async () => {
  const { readFileSync } = await import('node:fs');
  const { createKafkaRelay } = await import('idemflow/kafka');
  const text = readFileSync(new URL('../../../docs/kafka.md', import.meta.url), 'utf8');
  const block = [...text.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((code) => code.includes('createKafkaRelay(producer'));
  assert.ok(block, 'the relay block is in docs/kafka.md');
  const body = block.replace(/^import .*$/gm, '');
  const sent = [];
  const kafka = { producer: () => ({ connect: async () => {}, send: async (record) => sent.push(record) }) };
  const store = new InMemoryStore([swap(1)]);
  const run = new Function(
    'kafka',
    'store',
    'createOutboxConsumer',
    'createKafkaRelay',
    'RuleSet',
    `return (async () => {\n${body}\nreturn consumer;\n})();`,
  );
  // The block's start-up check is live: with a handler left out, it refuses to start.
  const fewer = new Function(
    'kafka',
    'store',
    'createOutboxConsumer',
    'createKafkaRelay',
    'RuleSet',
    `return (async () => {\n${body.replace('ruleSet.operationTypes()', "['START_EXCHANGE']")}\nreturn consumer;\n})();`,
  );
  await assert.rejects(fewer(kafka, store, createOutboxConsumer, createKafkaRelay, RuleSet), (error) => {
    assert.deepEqual(error.details.types, ['OPEN_REVIEW', 'REVIEW_DEPOSIT', 'SEND_PAYOUT']);
    return true;
  });
  const consumer = await run(kafka, store, createOutboxConsumer, createKafkaRelay, RuleSet);
  try {
    await processEvent(store, confirmation(1));
    const deadline = Date.now() + 10_000;
    while (sent.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.deepEqual(
      sent.map((record) => record.messages[0].headers['idemflow-operation-type']),
      ['START_EXCHANGE'],
    );
  } finally {
    await consumer.stop({ timeoutMs: 5_000 });
  }
});
