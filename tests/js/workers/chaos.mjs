// The broker chaos run: real RabbitMQ or NATS JetStream, real PostgreSQL, the
// example worker and outbox-consumer programs (js/examples, copied into
// tests/js/examples by `make examples`) as separate processes, SIGKILLed while
// they hold deliveries or claims, and the example fake provider in this
// process. The plan is per-swap histories whose end state does not depend on
// delivery order under a reorder-safe rule set; the oracle is the same rule
// set applied to each history in order through an InMemoryStore.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createDeliveryHandler, InMemoryStore } from 'idemflow';
import { openStore, PG_URL, tablesFor, uniquePrefix } from './backends.mjs';
import { random, shuffle } from './broker.mjs';
import { kafkaFor, watchTopics } from './kafka.mjs';

const TESTS_JS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const EXAMPLES = path.join(TESTS_JS, 'examples');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---- The plan ---------------------------------------------------------------

/**
 * Histories per swap, by kind (the mix repeats every 20 swaps):
 * - confirmed (55%): a detection and a confirmation of one deposit (a third
 *   only the confirmation): exchanged.
 * - complete (5%): detection, confirmation, exchange completed, payout
 *   confirmed: exchanged and paid out. EXCHANGE_COMPLETED follows the
 *   START_EXCHANGE operation and PAYOUT_CONFIRMED the SEND_PAYOUT operation
 *   (declared in the rule set), so they are published when the provider
 *   carries those out, as a real exchange would answer.
 * - detected (10%): a detection only: not exchanged.
 * - reversed (10%): a detection and the reversal of that deposit (no
 *   confirmation: a reversal next to a confirmation is a declared race).
 * - deadline (10%): only the deadline (a deadline next to a deposit is a race).
 * - conflict (5%): one event id published with two amounts and nothing else:
 *   whichever arrives first applies, the other is parked.
 * - reincluded (the share `reinclusions` of the swaps, taken from the mix
 *   above; 10% by default): detection, reversal, detection again and
 *   confirmation of one deposit, a reorganisation that mines it again:
 *   deposit-swap v3 exchanges it once in any order (v2, which lost it in
 *   order, was not reorder-safe for it).
 * - two-deposits (the share `secondDeposits` of the swaps, taken from the
 *   mix likewise and from other swaps than the re-included ones; 10% by
 *   default): the host creates the swap with its `expectedUnits`, the first
 *   deposit's amount; that deposit is detected and confirmed, and so is a
 *   second one (another depositRef), alternately `full` (it covers too: the
 *   two confirmations race, the first the swap sees is exchanged and the
 *   other reviewed, so the oracle gives both ends and the run must reach
 *   one) and `partial` (half the amount: reviewed, never exchanged).
 * Every deposit event carries `sequence`, as a chain watcher numbers what it
 * emits about one depositRef: its place among that deposit's events in
 * history order (1, 2, …). Every valid event goes out 1 to 3 times under its
 * id, and half of them again under a new id (another observer, the same
 * `sequence`). `late` confirmed swaps are created only after publishing
 * started, so their events first meet UNKNOWN_WORKFLOW and come back through
 * the retry path.
 */
export function chaosPlan({
  swaps: count = 1000,
  seed = 1,
  late = 20,
  invalid = 150,
  runId = 'run',
  confirmationOnly = 0.33,
  reinclusions = 0.1,
  secondDeposits = 0.1,
}) {
  const rand = random(seed);
  const kinds = [
    'confirmed',
    'confirmed',
    'confirmed',
    'confirmed',
    'confirmed',
    'confirmed',
    'confirmed',
    'confirmed',
    'confirmed',
    'confirmed',
    'confirmed',
    'complete',
    'detected',
    'detected',
    'reversed',
    'reversed',
    'deadline',
    'deadline',
    'conflict',
    'confirmed',
  ];
  const swaps = [];
  const messages = []; // { body: Buffer, kind: 'event' | 'conflict' | 'invalid', eventId? }
  const validIds = new Set();
  const conflicts = new Map(); // workflowId -> { eventId, bodies: [a, b], amounts: [a, b] }
  let lateLeft = late;

  const publish = (event, copies, into = messages) => {
    const body = Buffer.from(JSON.stringify(event));
    for (let c = 0; c < copies; c += 1) into.push({ body, kind: 'event', eventId: event.eventId });
  };
  const reactions = new Map(); // "exchanges/<workflowId>" -> messages published once the provider did it
  const copies = () => 1 + (rand() < 0.75 ? 1 : 0) + (rand() < 0.5 ? 1 : 0);
  // Exact shares spread evenly, drawing nothing from `rand` (the rest of the plan is unchanged); the
  // second deposits half a period after the re-inclusions, so the two shares meet no swap twice at 0.1.
  const takes = (share, i, phase = 0) => Math.floor((i + 1) * share + phase) > Math.floor(i * share + phase);
  let twoDeposits = 0;

  for (let i = 0; i < count; i += 1) {
    const id = `swap-${runId}-${i}`;
    let kind = kinds[i % kinds.length];
    if (takes(reinclusions, i)) kind = 'reincluded';
    else if (takes(secondDeposits, i, 0.5)) kind = 'two-deposits';
    const isLate = kind === 'confirmed' && lateLeft > 0 && i % 7 === 0;
    if (isLate) lateLeft -= 1;
    const deposit = { depositRef: `btc-mainnet:tx-${(i * 7919).toString(16)}:vout-${i % 3}`, amountUnits: `${(i % 97) + 1}0000${i}` };
    const ev = (type, fields = {}) => ({ eventId: `watcher-a:${id}:${type.toLowerCase()}`, workflowId: id, type, ...fields });
    // The watcher's observations of the deposit, numbered in the order it emits them (a re-detection has its own id).
    const observed = (...types) =>
      types.map((type, k) => {
        const event = ev(type, { ...deposit, sequence: k + 1 });
        // A type observed again (the re-detection) is a new event of the watcher's: its own id.
        return types.indexOf(type) < k ? { ...event, eventId: `${event.eventId}:${k + 1}` } : event;
      });
    let history;
    let data = {};
    let second = null;
    switch (kind) {
      case 'confirmed':
        history = rand() < confirmationOnly ? observed('DEPOSIT_CONFIRMED') : observed('DEPOSIT_DETECTED', 'DEPOSIT_CONFIRMED');
        break;
      case 'complete':
        history = [
          ...observed('DEPOSIT_DETECTED', 'DEPOSIT_CONFIRMED'),
          ev('EXCHANGE_COMPLETED', { payoutUnits: `${i + 1}77` }),
          ev('PAYOUT_CONFIRMED', { payoutRef: `eth:tx-${i}` }),
        ];
        break;
      case 'detected':
        history = observed('DEPOSIT_DETECTED');
        break;
      case 'reversed':
        history = observed('DEPOSIT_DETECTED', 'DEPOSIT_REVERSED');
        break;
      case 'reincluded':
        history = observed('DEPOSIT_DETECTED', 'DEPOSIT_REVERSED', 'DEPOSIT_DETECTED', 'DEPOSIT_CONFIRMED');
        break;
      case 'deadline':
        history = [ev('DEADLINE_PASSED')];
        break;
      case 'two-deposits': {
        second = twoDeposits % 2 === 0 ? 'full' : 'partial';
        twoDeposits += 1;
        data = { expectedUnits: deposit.amountUnits };
        const other = {
          depositRef: `btc-mainnet:tx-${(i * 7919 + 1).toString(16)}:vout-${(i + 1) % 3}`,
          amountUnits: second === 'full' ? deposit.amountUnits : (BigInt(deposit.amountUnits) / 2n).toString(),
        };
        // The second deposit's own numbered observations, under its own event ids.
        const secondEvent = (type, k) => ({
          ...ev(type, { ...other, sequence: k + 1 }),
          eventId: `watcher-a:${id}:second:${type.toLowerCase()}`,
        });
        history = [
          ...observed('DEPOSIT_DETECTED', 'DEPOSIT_CONFIRMED'),
          secondEvent('DEPOSIT_DETECTED', 0),
          secondEvent('DEPOSIT_CONFIRMED', 1),
        ];
        break;
      }
      case 'conflict': {
        const eventId = `watcher-a:${id}:detected`;
        const amounts = [deposit.amountUnits, `${deposit.amountUnits}1`];
        const bodies = amounts.map((amountUnits) =>
          Buffer.from(
            JSON.stringify({ eventId, workflowId: id, type: 'DEPOSIT_DETECTED', depositRef: deposit.depositRef, amountUnits, sequence: 1 }),
          ),
        );
        conflicts.set(id, { eventId, bodies, amounts, depositRef: deposit.depositRef });
        validIds.add(eventId);
        for (const body of bodies) messages.push({ body, kind: 'conflict', eventId });
        history = [];
        break;
      }
      default:
        throw new Error(kind);
    }
    const oracleHistory = [];
    for (const event of history) {
      const answers = { EXCHANGE_COMPLETED: 'exchanges', PAYOUT_CONFIRMED: 'payouts' }[event.type];
      const into = answers ? [] : messages;
      if (answers) reactions.set(`${answers}/${id}`, into);
      validIds.add(event.eventId);
      publish(event, copies(), into);
      oracleHistory.push(event);
      if (rand() < 0.5) {
        const again = { ...event, eventId: event.eventId.replace('watcher-a:', 'watcher-b:') };
        validIds.add(again.eventId);
        publish(again, 1 + (rand() < 0.3 ? 1 : 0), into);
        oracleHistory.push(again);
      }
    }
    // Two covering deposits race: either may be the one exchanged, so the second deposit's events first is another end.
    const secondFirst = () => {
      const firstRef = deposit.depositRef;
      return [...oracleHistory.filter((e) => e.depositRef !== firstRef), ...oracleHistory.filter((e) => e.depositRef === firstRef)];
    };
    const histories = second === 'full' ? [oracleHistory, secondFirst()] : [oracleHistory];
    swaps.push({ id, kind, late: isLate, data, second, history: oracleHistory, histories });
  }

  // Bodies that are not events, each distinct so the dead-letter queue can be checked exactly.
  const invalidBodies = [];
  for (let k = 0; k < invalid; k += 1) {
    const target = swaps[(k * 13) % swaps.length].id;
    let body;
    switch (k % 8) {
      case 0:
        body = JSON.stringify({
          eventId: `bad:${runId}:${k}`,
          workflowId: target,
          type: 'DEPOSIT_CONFIRMED',
          depositRef: 'btc:x',
          amountUnits: 12.5,
        });
        break;
      case 1:
        body = JSON.stringify({ eventId: `bad:${runId}:${k}`, workflowId: target, type: 'DEPOSIT_DETECTED', depositRef: 'btc:x' });
        break;
      case 2:
        body = JSON.stringify({ eventId: `bad:${runId}:${k}`, workflowId: target, type: 'DEPOSIT_TELEPORTED' });
        break;
      case 3:
        body = `not json ${k} {`;
        break;
      case 4:
        body = `[${k}, "an array"]`;
        break;
      case 5:
        body = String(k);
        break;
      case 6:
        body = Buffer.concat([Buffer.from('{"eventId":"'), Buffer.from([0xff, 0xfe, k & 0xff]), Buffer.from('"}')]);
        break;
      default:
        body = JSON.stringify({
          eventId: `bad:${runId}:${k}`,
          workflowId: target,
          type: 'DEADLINE_PASSED',
          padding: 'x'.repeat(70 * 1024),
        });
        break;
    }
    invalidBodies.push(Buffer.isBuffer(body) ? body : Buffer.from(body));
  }
  for (const body of invalidBodies) messages.push({ body, kind: 'invalid' });
  return { swaps, messages, reactions, validIds, conflicts, invalidBodies, seed };
}

/** The workflow the host creates for a swap of the plan, before its events: in `waiting`, with the swap's data (its expectedUnits). */
export const workflowOf = (swap) => ({ id: swap.id, status: 'waiting', revision: 1, ...swap.data });

/**
 * Each swap's history applied in order, through the handler over an
 * InMemoryStore: the ends every order may reach (one per history of the
 * swap: two for two covering deposits, whose race decides which is
 * exchanged), each `{ state, operations }`.
 */
export async function oracle(plan) {
  const expected = new Map(plan.swaps.map((swap) => [swap.id, []]));
  const rounds = Math.max(...plan.swaps.map((swap) => swap.histories.length));
  for (let round = 0; round < rounds; round += 1) {
    const swaps = plan.swaps.filter((swap) => swap.histories.length > round);
    const store = new InMemoryStore(swaps.map(workflowOf));
    const handle = createDeliveryHandler(store, { ruleSet: 'deposit-swap' });
    for (const swap of swaps) {
      for (const event of swap.histories[round]) {
        const verdict = await handle(event);
        if (verdict.action !== 'ack')
          throw new Error(`the in-order history of ${swap.id} is not clean: ${event.type} → ${verdict.action} ${verdict.error?.code}`);
      }
    }
    if (round === 0)
      for (const [id, conflict] of plan.conflicts)
        await handle(conflict.bodies[0]).then((v) => {
          if (v.action !== 'ack') throw new Error(id);
        });
    const snapshot = store.snapshot();
    for (const swap of swaps) {
      const workflow = snapshot.workflows.get(swap.id);
      const operations = [...snapshot.outbox.values()]
        .filter((op) => op.workflowId === swap.id)
        .map((op) => op.id)
        .sort();
      expected.get(swap.id).push({ state: stateOf(workflow), operations });
    }
  }
  return expected;
}

/** JSON text with every object's keys sorted (a store may keep a map's keys in another order). */
const canonical = (value) =>
  JSON.stringify(value, (_key, v) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(
          Object.keys(v)
            .sort()
            .map((k) => [k, v[k]]),
        )
      : v,
  );

/** What must not depend on delivery order: status and recorded fields, the deposits map among them (not the revision). */
function stateOf(workflow) {
  const { id, revision, ...rest } = workflow;
  return canonical(rest);
}

/** The amount a swap holds for `depositRef`: its entry in the deposits map (deposit-swap v3 records nothing else before the exchange). */
const amountOf = (workflow, depositRef) => workflow?.deposits?.[depositRef]?.amountUnits;

// ---- Brokers ----------------------------------------------------------------

async function rabbitmq(url, base) {
  const { default: amqp } = await import('amqplib');
  const { declareQueues, publishConfirmed, queueNames } = await import(path.join(EXAMPLES, 'rabbitmq-worker/topology.mjs'));
  const names = queueNames(base);
  const connection = await amqp.connect(url);
  const channel = await connection.createConfirmChannel();
  await declareQueues(channel, names);
  const drainQueue = async (queue) => {
    const bodies = [];
    for (;;) {
      const message = await channel.get(queue, { noAck: true });
      if (!message) return bodies;
      bodies.push(message.content);
    }
  };
  return {
    env: { IDEMFLOW_AMQP_URL: url, SWAPS_QUEUE: base },
    worker: path.join(EXAMPLES, 'rabbitmq-worker/worker.mjs'),
    async publisher() {
      const own = await amqp.connect(url);
      const ch = await own.createConfirmChannel();
      return {
        publish: (body) => publishConfirmed(ch, names.main, body),
        close: () => own.close(),
      };
    },
    /** Messages waiting in the main and retry queues (unacknowledged ones are not counted: see quiet). */
    async pending() {
      const [main, retry] = [await channel.checkQueue(names.main), await channel.checkQueue(names.retry)];
      return main.messageCount + retry.messageCount;
    },
    async settled() {
      return { dead: (await channel.checkQueue(names.dead)).messageCount, parked: (await channel.checkQueue(names.parked)).messageCount };
    },
    readDead: () => drainQueue(names.dead),
    readParked: () => drainQueue(names.parked),
    async teardown() {
      for (const queue of Object.values(names)) await channel.deleteQueue(queue).catch(() => {});
      await connection.close().catch(() => {});
    },
  };
}

async function nats(url, base, { ackWaitMs = 4000 } = {}) {
  const { connect } = await import('@nats-io/transport-node');
  const { AckPolicy, jetstream, jetstreamManager } = await import('@nats-io/jetstream');
  const { nanos } = await import('@nats-io/transport-node');
  const { ensureStream, streamNames } = await import(path.join(EXAMPLES, 'nats-worker/topology.mjs'));
  const names = streamNames(base);
  const connection = await connect({ servers: url });
  const jsm = await jetstreamManager(connection);
  await ensureStream(jsm, names, { ackWaitMs });
  const js = jetstream(connection);
  const subjectCount = async (subject) => {
    const info = await jsm.streams.info(names.stream, { subjects_filter: subject });
    return info.state.subjects?.[subject] ?? 0;
  };
  const read = async (subject) => {
    const total = await subjectCount(subject);
    const bodies = [];
    if (total === 0) return bodies;
    // An ephemeral reader of one subject (filter_subject: servers before 2.10 know no filter_subjects).
    const reader = await jsm.consumers.add(names.stream, {
      filter_subject: subject,
      ack_policy: AckPolicy.None,
      inactive_threshold: nanos(30_000),
    });
    const consumer = await js.consumers.get(names.stream, reader.name);
    while (bodies.length < total) {
      const batch = await consumer.fetch({ max_messages: total - bodies.length, expires: 2000 });
      let got = 0;
      for await (const message of batch) {
        bodies.push(Buffer.from(message.data));
        got += 1;
      }
      if (got === 0) break;
    }
    return bodies;
  };
  return {
    env: { IDEMFLOW_NATS_URL: url, SWAPS_STREAM: base, ACK_WAIT_MS: String(ackWaitMs) },
    worker: path.join(EXAMPLES, 'nats-worker/worker.mjs'),
    async publisher() {
      const own = await connect({ servers: url });
      const ownJs = jetstream(own);
      return { publish: (body) => ownJs.publish(names.events, body), close: () => own.drain() };
    },
    async pending() {
      const info = await jsm.consumers.info(names.stream, names.consumer);
      return info.num_pending + info.num_ack_pending;
    },
    async settled() {
      return { dead: await subjectCount(names.dead), parked: await subjectCount(names.parked) };
    },
    readDead: () => read(names.dead),
    readParked: () => read(names.parked),
    async teardown() {
      await jsm.streams.delete(names.stream).catch(() => {});
      await connection.drain().catch(() => {});
    },
  };
}

async function kafka(brokers, base) {
  const { createProducer, ensureTopics, keyOf, topicNames } = await import(path.join(EXAMPLES, 'kafka-worker/topology.mjs'));
  const names = topicNames(base);
  const client = kafkaFor(`chaos-${base}`, brokers);
  await ensureTopics(client, names);
  // One reader of every topic for the whole run: the ends of the partitions, and the dead and parked messages.
  const watcher = await watchTopics(client, [names.main, names.retry, names.dead, names.parked]);
  const read = async (topic) => {
    await watcher.caughtUp();
    return watcher.messages(topic).map((message) => message.value);
  };
  return {
    env: { IDEMFLOW_KAFKA_BROKERS: brokers, SWAPS_TOPIC: base, SESSION_TIMEOUT_MS: '6000', BATCH_SIZE: '16' },
    worker: path.join(EXAMPLES, 'kafka-worker/worker.mjs'),
    // A kill stops a group for a session timeout and a rebalance (about 10 s here): the traffic comes
    // over 10 s per kill, so that every kill finds deliveries in flight, each after the rebalance of the last.
    publishMsPerKill: 10_000,
    groupRebalances: true,
    async publisher() {
      const producer = createProducer(client);
      await producer.connect();
      return {
        publish: (body) => producer.send({ topic: names.main, acks: -1, messages: [{ key: keyOf(body), value: body }] }),
        close: () => producer.disconnect(),
      };
    },
    /** Messages of the main and retry topics the group has not committed. */
    pending: () => watcher.backlog(names.group, [names.main, names.retry]),
    readDead: () => read(names.dead),
    readParked: () => read(names.parked),
    async teardown() {
      await watcher.close();
      const admin = client.admin();
      await admin.connect();
      await admin.deleteGroups([names.group]).catch(() => {});
      await admin.deleteTopics({ topics: [names.main, names.retry, names.dead, names.parked] }).catch(() => {});
      await admin.disconnect().catch(() => {});
    },
  };
}

/** The brokers of the broker tests: a name and the variable holding its URL. */
export const BROKERS = Object.freeze([
  { name: 'rabbitmq', env: 'IDEMFLOW_AMQP_URL' },
  { name: 'nats', env: 'IDEMFLOW_NATS_URL' },
  { name: 'kafka', env: 'IDEMFLOW_KAFKA_BROKERS' },
]);

/** Why a broker test cannot run here (its URL, PostgreSQL's or the copied examples are missing), or false. */
export function brokerSkip(env) {
  if (!PG_URL) return 'IDEMFLOW_PG_URL is not set';
  if (!process.env[env]) return `${env} is not set`;
  if (!fs.existsSync(EXAMPLES)) return 'tests/js/examples is missing: run `make examples`';
  return false;
}

/**
 * The harness of one broker ('rabbitmq' | 'nats' | 'kafka') over queues, a
 * stream or topics named after `base`: `{ env, worker, publisher(), pending(),
 * settled(), readDead(), readParked(), teardown() }`, `env` what a worker
 * process needs to find them. NATS: `ackWaitMs` before an unacknowledged
 * message is redelivered.
 */
export function brokerHarness(brokerName, url, base, { ackWaitMs } = {}) {
  switch (brokerName) {
    case 'rabbitmq':
      return rabbitmq(url, base);
    case 'nats':
      return nats(url, base.replaceAll('-', '_'), { ackWaitMs });
    case 'kafka':
      return kafka(url, base);
    default:
      throw new Error(`no chaos harness for ${brokerName}`);
  }
}

// ---- The run ----------------------------------------------------------------

/** A child process of an example program, restartable, with its JSON log lines parsed; `nodeArgs` go before the script. */
export function supervise(script, env, onLine, nodeArgs = []) {
  const child = spawn(process.execPath, [...nodeArgs, script], {
    cwd: TESTS_JS,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let buffered = '';
  let stderr = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk) => {
    buffered += chunk;
    for (let newline = buffered.indexOf('\n'); newline >= 0; newline = buffered.indexOf('\n')) {
      const line = buffered.slice(0, newline);
      buffered = buffered.slice(newline + 1);
      try {
        onLine(JSON.parse(line), child);
      } catch {
        /* not a log line */
      }
    }
  });
  child.stderr.on('data', (chunk) => {
    stderr = (stderr + chunk).slice(-4000);
  });
  child.stderrTail = () => stderr;
  return child;
}

/**
 * Runs the plan through `brokerName` ('rabbitmq' | 'nats' | 'kafka') and returns the
 * figures and the list of problems found (empty when every check holds).
 */
export async function runChaos({
  brokerName,
  url,
  swaps = 1000,
  seed = Date.now() % 100000,
  workers = 3,
  consumers = 2,
  workerKills = 6,
  consumerKills = 3,
  timeoutMs = 150_000,
  note = () => {},
  planOptions = {},
}) {
  const runId = uniquePrefix();
  const plan = chaosPlan({ swaps, seed, runId, ...planOptions });
  const expected = await oracle(plan);
  // Every end of a swap has as many operations, and as many exchanges, as its first.
  const expectedOps = new Set([...expected.values()].flatMap((ends) => ends[0].operations));
  const tables = tablesFor(runId);
  const db = await openStore('pg', { tables, url: PG_URL, poolSize: 2 });
  await db.store.migrate();
  for (const swap of plan.swaps) if (!swap.late) await db.store.putWorkflow(workflowOf(swap));

  const broker = await brokerHarness(brokerName, url, `idemflow-${runId}`);
  const { startFakeProvider } = await import(path.join(EXAMPLES, 'shared/fake-provider.mjs'));

  const reactionCount = [...plan.reactions.values()].reduce((n, list) => n + list.length, 0);
  const figures = {
    broker: brokerName,
    seed,
    swaps,
    messages: plan.messages.length + reactionCount,
    validEventIds: plan.validIds.size,
    invalid: plan.invalidBodies.length,
    conflicts: plan.conflicts.size,
    reincluded: plan.swaps.filter((swap) => swap.kind === 'reincluded').length,
    reincludedExchanged: 0,
    secondDeposits: plan.swaps.filter((swap) => swap.second !== null).length,
    secondFull: plan.swaps.filter((swap) => swap.second === 'full').length,
    secondPartial: plan.swaps.filter((swap) => swap.second === 'partial').length,
    secondExchanged: 0,
    depositReviews: 0,
    deliveries: 0,
    verdicts: {},
    workerKills: 0,
    consumerKills: 0,
    exchanges: 0,
    payouts: 0,
    providerCalls: 0,
    provider503: 0,
    stuck: null,
  };
  const children = { workers: new Set(), consumers: new Set() };
  let stopping = false;
  let lastWorkerLine = Date.now();
  // The host creates a late swap once one of its events has met UNKNOWN_WORKFLOW and waits in the retry
  // path, as a host that learns of a swap after its deposit was seen; soon enough that the event is not
  // retried past maxDeliveries (parked) while the traffic is still coming.
  const lateIds = new Set(plan.swaps.filter((swap) => swap.late).map((swap) => swap.id));
  const late = new Map(); // id -> the putWorkflow
  const createLate = (id) => {
    if (!lateIds.has(id)) return null;
    if (!late.has(id)) {
      const created = db.store.putWorkflow(workflowOf(plan.swaps.find((swap) => swap.id === id)));
      created.catch(() => {}); // awaited below, where a failure fails the run
      late.set(id, created);
    }
    return late.get(id);
  };
  let generationAtKill = 0;
  // Every 8% of the messages from 6% on, closer together when more kills must fit before 94%.
  const killStep = Math.min(0.08, 0.88 / workerKills);
  const workerKillAt = Array.from({ length: workerKills }, (_, k) => Math.round(figures.messages * (0.06 + killStep * k)));
  const exchangesExpected = [...expectedOps].filter((id) => id.startsWith('start-exchange:')).length;
  const consumerKillAt = Array.from({ length: consumerKills }, (_, k) => Math.round(exchangesExpected * (0.15 + 0.25 * k)));
  const fatal = [];
  const reactor = await broker.publisher();
  const reacting = [];

  const provider = await startFakeProvider({
    failRate: 0.15,
    onCall: async ({ kind, caller, effect }) => {
      // The exchange (or payout) provider answers with its own event once it has done the work.
      const reaction = effect.calls === 1 ? plan.reactions.get(`${kind}/${effect.body.workflowId}`) : undefined;
      if (reaction) reacting.push(...reaction.map((message) => reactor.publish(message.body)));
      if (kind !== 'exchanges' || figures.consumerKills >= consumerKillAt.length) return;
      if (provider.effects.size < consumerKillAt[figures.consumerKills]) return;
      const victim = [...children.consumers].find((c) => String(c.pid) === caller);
      if (!victim) return;
      // The exchange is carried out; its consumer dies before it hears so and before it records done.
      figures.consumerKills += 1;
      victim.kill('SIGKILL');
      await sleep(50);
    },
  });

  const workerEnv = {
    ...broker.env,
    IDEMFLOW_PG_URL: PG_URL,
    IDEMFLOW_TABLE_PREFIX: runId,
    RETRY_BASE_DELAY_MS: '200',
    RETRY_MAX_DELAY_MS: '2000',
    PREFETCH: '16',
  };
  const consumerEnv = {
    IDEMFLOW_PG_URL: PG_URL,
    IDEMFLOW_TABLE_PREFIX: runId,
    PROVIDER_URL: provider.url,
    OUTBOX_LEASE_MS: '3000',
    OUTBOX_BASE_DELAY_MS: '100',
    OUTBOX_POLL_MS: '100',
  };

  const startWorker = () => {
    const child = supervise(broker.worker, workerEnv, (line, self) => {
      if (line.role !== 'worker') return;
      // A consumer group's leader reports each generation it completes: after the first kill, each is a rebalance.
      if (line.event === 'group-join' && line.isLeader) {
        figures.generations = (figures.generations ?? 0) + 1;
        if (figures.workerKills > 0) figures.rebalances = (figures.rebalances ?? 0) + 1;
      }
      if (line.action === 'stop') fatal.push(line);
      if (line.code === 'UNKNOWN_WORKFLOW') createLate(line.workflowId);
      if (!line.action || line.action === 'stop') return;
      lastWorkerLine = Date.now();
      figures.deliveries += 1;
      const why = line.field ? `field ${line.field}` : line.reason;
      const label = line.action === 'ack' ? `ack ${line.outcome}` : `${line.action} ${line.code}${why ? ` (${why})` : ''}`;
      figures.verdicts[label] = (figures.verdicts[label] ?? 0) + 1;
      // SIGKILL a worker that just reported other deliveries still in its hands.
      // In a consumer group, a kill is taken only once the group has rebalanced after the last one, so each costs its own rebalance.
      const settledGroup = !broker.groupRebalances || (figures.generations ?? 0) > generationAtKill;
      if (
        figures.workerKills < workerKillAt.length &&
        figures.deliveries >= workerKillAt[figures.workerKills] &&
        line.inFlight >= 2 &&
        settledGroup
      ) {
        figures.workerKills += 1;
        generationAtKill = figures.generations ?? 0;
        self.kill('SIGKILL');
      }
    });
    children.workers.add(child);
    child.once('exit', () => {
      children.workers.delete(child);
      if (!stopping) setTimeout(startWorker, 200);
    });
  };
  const startConsumer = () => {
    const child = supervise(path.join(EXAMPLES, 'shared/outbox-worker.mjs'), consumerEnv, () => {});
    children.consumers.add(child);
    child.once('exit', () => {
      children.consumers.delete(child);
      if (!stopping) setTimeout(startConsumer, 200);
    });
  };

  const problems = [];
  const started = Date.now();
  let drainedAt = null;
  try {
    for (let i = 0; i < workers; i += 1) startWorker();
    for (let i = 0; i < consumers; i += 1) startConsumer();

    // Several publishers, each with its own connection and its own shuffled share: no order survives.
    const rand = random(seed + 1);
    const shares = Array.from({ length: 4 }, () => []);
    for (const message of plan.messages) shares[Math.floor(rand() * shares.length)].push(message.body);
    const publishing = shares.map(async (share) => {
      const publisher = await broker.publisher();
      const bodies = shuffle(share, rand);
      // In order within a publisher, a window of unconfirmed messages at a time (spread out for a consumer group).
      const windows = Math.ceil(bodies.length / 32);
      for (let i = 0; i < bodies.length; i += 32) {
        await Promise.all(bodies.slice(i, i + 32).map((body) => publisher.publish(body)));
        if (broker.publishMsPerKill) await sleep((broker.publishMsPerKill * workerKills) / windows);
      }
      await publisher.close();
    });
    await Promise.all(publishing);
    note(`${brokerName}: published ${plan.messages.length} messages in ${Date.now() - started} ms`);
    // Late swaps the workers have not asked for yet (see createLate) are created now, at the latest.
    const lateCount = plan.swaps.filter((swap) => swap.late).length;
    while (late.size < lateCount && Date.now() - started < timeoutMs / 2 && fatal.length === 0) await sleep(100);
    await Promise.all(plan.swaps.filter((swap) => swap.late).map((swap) => createLate(swap.id)));

    // Drained: every receipt and every operation done, nothing waiting in the broker, workers quiet.
    const query = db.query;
    let lastProgress = Date.now();
    const receiptCount = async () => Number((await query(`SELECT COUNT(*) AS n FROM "${tables.inbox}"`, []))[0].n);
    const doneCount = async () => Number((await query(`SELECT COUNT(*) AS n FROM "${tables.outbox}" WHERE status = 'done'`, []))[0].n);
    while (Date.now() - started < timeoutMs && fatal.length === 0) {
      const [receipts, done, pending] = [await receiptCount(), await doneCount(), await broker.pending()];
      if (Date.now() - lastProgress >= 5000) {
        lastProgress = Date.now();
        note(
          `${brokerName} +${Math.round((Date.now() - started) / 1000)} s: ${figures.deliveries} deliveries, receipts ${receipts}/${plan.validIds.size}, operations done ${done}/${expectedOps.size}, in the broker ${pending}`,
        );
      }
      if (receipts >= plan.validIds.size && done >= expectedOps.size && pending === 0 && Date.now() - lastWorkerLine > 1500) {
        drainedAt = Date.now();
        break;
      }
      await sleep(250);
    }
    await Promise.all(reacting);
    if (fatal.length > 0) problems.push(`a worker stopped on a fatal error: ${JSON.stringify(fatal[0])}`);
    if (drainedAt === null) problems.push(`not drained after ${timeoutMs} ms`);
  } finally {
    stopping = true;
    const all = [...children.workers, ...children.consumers];
    for (const child of all) child.kill('SIGTERM');
    await Promise.all(all.map((child) => (child.exitCode === null && child.signalCode === null ? once(child, 'exit') : null)));
  }

  try {
    const elapsed = ((drainedAt ?? Date.now()) - started) / 1000;
    figures.seconds = Number(elapsed.toFixed(1));
    figures.deliveriesPerSecond = Math.round(figures.deliveries / elapsed);
    figures.providerCalls = provider.calls.total;
    figures.provider503 = provider.calls.failed;
    figures.exchanges = [...provider.effects.values()].filter((e) => e.kind === 'exchanges').length;
    figures.payouts = [...provider.effects.values()].filter((e) => e.kind === 'payouts').length;

    // Nothing left in the broker once every worker has let go of its deliveries.
    const pending = await broker.pending();
    if (pending !== 0) problems.push(`${pending} messages still in the broker`);

    // Every swap in the state one of its in-order histories gives (two covering deposits: either exchanged), with that
    // history's operations, every operation done; a conflict swap holds one of its two amounts.
    let stuck = 0;
    const operations = new Map();
    for (const row of await db.query(`SELECT id, workflow_id, status FROM "${tables.outbox}"`, [])) operations.set(row.id, row);
    const wantOps = new Set(); // the operations of the end each swap reached (of its first end when it reached none)
    for (const swap of plan.swaps) {
      const workflow = await db.store.getWorkflow(swap.id);
      const ends = expected.get(swap.id);
      const conflict = plan.conflicts.get(swap.id);
      const ops = [...operations.values()].filter((op) => op.workflow_id === swap.id);
      const opIds = JSON.stringify(ops.map((op) => op.id).sort());
      let want;
      if (conflict) {
        want = workflow.status === 'deposit' && conflict.amounts.includes(amountOf(workflow, conflict.depositRef)) ? ends[0] : null;
      } else {
        want = ends.find((end) => stateOf(workflow) === end.state && opIds === JSON.stringify(end.operations)) ?? null;
      }
      for (const id of (want ?? ends[0]).operations) wantOps.add(id);
      if (want === null || opIds !== JSON.stringify(want.operations) || !ops.every((op) => op.status === 'done')) {
        stuck += 1;
        if (stuck <= 5)
          problems.push(
            `${swap.id} (${swap.kind}): ${JSON.stringify(workflow)} with operations ${JSON.stringify(ops)}; expected one of ${JSON.stringify(ends)}`,
          );
      }
    }
    figures.stuck = stuck;
    if (stuck > 0) problems.push(`${stuck} swaps are not where their history leads`);

    // The provider carried out exactly the expected operations, each once (it records an idempotency key once).
    const keys = new Set([...provider.effects.values()].map((e) => e.key));
    for (const id of wantOps) if (!keys.has(id)) problems.push(`operation ${id} was never carried out`);
    for (const key of keys) if (!wantOps.has(key)) problems.push(`the provider carried out ${key}, which no history asks for`);
    // Every operation id ends with its workflow's id (a per-deposit one has the depositRef before it).
    if ([...provider.effects.values()].some((e) => !e.key.endsWith(`:${e.body.workflowId}`)))
      problems.push('an effect names another workflow than its idempotency key');
    const perSwap = new Map();
    for (const e of provider.effects.values())
      if (e.kind === 'exchanges') perSwap.set(e.body.workflowId, (perSwap.get(e.body.workflowId) ?? 0) + 1);
    for (const [id, n] of perSwap) if (n !== 1) problems.push(`${id} was exchanged ${n} times`);
    // A reorganisation's re-inclusion is exchanged, once (the count of one per swap is checked above).
    figures.reincludedExchanged = plan.swaps.filter((swap) => swap.kind === 'reincluded' && perSwap.has(swap.id)).length;
    if (figures.reincludedExchanged !== figures.reincluded) {
      problems.push(
        `${figures.reincluded - figures.reincludedExchanged} of ${figures.reincluded} re-included deposits were never exchanged`,
      );
    }

    // Second deposits: each such swap exchanged once (its first deposit covers), from a deposit that covers, and
    // the other confirmed deposit reviewed once (review-deposit:<depositRef>:<swap>); a partial one never exchanged.
    const reviewsOf = new Map(); // swap id -> the depositRefs carried out as review-deposit operations
    for (const e of provider.effects.values()) {
      if (!e.key.startsWith('review-deposit:')) continue;
      figures.depositReviews += 1;
      (reviewsOf.get(e.body.workflowId) ?? reviewsOf.set(e.body.workflowId, []).get(e.body.workflowId)).push(e.body.depositRef);
    }
    const exchangeOf = new Map(
      [...provider.effects.values()].filter((e) => e.kind === 'exchanges').map((e) => [e.body.workflowId, e.body.depositRef]),
    );
    let secondOk = 0;
    let secondBad = 0;
    for (const swap of plan.swaps.filter((s) => s.second !== null)) {
      const [first, other] = [...new Set(swap.history.map((e) => e.depositRef))];
      const exchanged = exchangeOf.get(swap.id);
      const reviewed = reviewsOf.get(swap.id) ?? [];
      const allowed = swap.second === 'full' ? [first, other] : [first];
      const problem =
        perSwap.get(swap.id) !== 1
          ? `exchanged ${perSwap.get(swap.id) ?? 0} times`
          : !allowed.includes(exchanged)
            ? `exchanged ${exchanged}, which does not cover`
            : reviewed.length !== 1 || reviewed[0] !== (exchanged === first ? other : first)
              ? `reviewed ${JSON.stringify(reviewed)} after exchanging ${exchanged}`
              : null;
      if (exchanged === other) figures.secondExchanged += 1;
      if (problem === null) secondOk += 1;
      else if (++secondBad <= 5) problems.push(`${swap.id} (a ${swap.second} second deposit): ${problem}`);
    }
    figures.secondDepositsOk = secondOk;
    if (secondOk !== figures.secondDeposits)
      problems.push(
        `${figures.secondDeposits - secondOk} of ${figures.secondDeposits} swaps with a second deposit were not exchanged once and reviewed once`,
      );

    // Receipts: exactly the distinct valid event ids.
    const receipts = new Set((await db.query(`SELECT event_id FROM "${tables.inbox}"`, [])).map((row) => row.event_id));
    const missing = [...plan.validIds].filter((id) => !receipts.has(id));
    const extra = [...receipts].filter((id) => !plan.validIds.has(id));
    if (missing.length || extra.length)
      problems.push(`receipts: ${missing.length} missing (${missing.slice(0, 3)}), ${extra.length} unexpected (${extra.slice(0, 3)})`);
    figures.receipts = receipts.size;

    // The dead-letter queue: exactly the invalid bodies.
    const dead = await broker.readDead();
    const deadSet = new Set(dead.map((b) => b.toString('base64')));
    const invalidSet = new Set(plan.invalidBodies.map((b) => b.toString('base64')));
    figures.deadLettered = dead.length;
    if (deadSet.size !== invalidSet.size || [...invalidSet].some((b) => !deadSet.has(b))) {
      const extraDead = dead.filter((b) => !invalidSet.has(b.toString('base64'))).map((b) => b.toString('utf8').slice(0, 120));
      problems.push(
        `dead letters: ${deadSet.size} distinct of ${invalidSet.size} invalid bodies; not invalid: ${JSON.stringify(extraDead.slice(0, 3))}`,
      );
    }

    // The parked queue: exactly one body of each conflict, the one whose amount the swap does not hold.
    const parked = await broker.readParked();
    figures.parked = parked.length;
    const parkedSet = new Set(parked.map((b) => b.toString('base64')));
    const wantParked = new Set();
    for (const [id, conflict] of plan.conflicts) {
      const workflow = await db.store.getWorkflow(id);
      const loser = conflict.amounts[0] === amountOf(workflow, conflict.depositRef) ? 1 : 0;
      wantParked.add(conflict.bodies[loser].toString('base64'));
    }
    if (parkedSet.size !== wantParked.size || [...wantParked].some((b) => !parkedSet.has(b))) {
      const extraParked = parked.filter((b) => !wantParked.has(b.toString('base64'))).map((b) => b.toString('utf8').slice(0, 160));
      problems.push(
        `parked: ${parkedSet.size} distinct, ${wantParked.size} conflicts; unexpected: ${JSON.stringify(extraParked.slice(0, 3))}`,
      );
    }
  } finally {
    await Promise.allSettled(reacting);
    await reactor.close().catch(() => {});
    await provider.close();
    await broker.teardown();
    await db.drop();
    await db.close();
  }
  // Every kill asked for but at most one (the run may drain before the last), and never fewer than 5 of more.
  if (figures.workerKills < Math.min(5, workerKills - 1)) problems.push(`only ${figures.workerKills} of ${workerKills} worker kills`);
  if (broker.groupRebalances && !(figures.rebalances >= figures.workerKills))
    problems.push(`${figures.rebalances ?? 0} rebalances after ${figures.workerKills} worker kills`);
  if (figures.consumerKills < 2) problems.push(`only ${figures.consumerKills} consumer kills`);
  return { figures, problems };
}
