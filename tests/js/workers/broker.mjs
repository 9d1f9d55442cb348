// The broker of the multi-process runs: an at-least-once queue in the parent
// process that hands deliveries to separate worker processes (each with its
// own connection), redelivers what was not acknowledged, and can SIGKILL a
// worker at random points and start another in its place.
import { fork } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { random } from '../examples/shared/random.mjs';
import { detectedSwap, WATCHER_SEQUENCE } from './fixtures.mjs';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'delivery-worker.mjs');

// A small seeded PRNG, so a failing run can be replayed with its seed: the examples' own.
export { random };

/** Shuffles `items` in place with `rand` (Fisher–Yates) and returns them. */
export function shuffle(items, rand) {
  for (let i = items.length - 1; i > 0; i -= 1) {
    const j = Math.floor(rand() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

/**
 * The workflows (status deposit, a deposit in their deposits map from the
 * watcher's detection, its observation 1) and the deliveries for them: per workflow,
 * confirmations and detections of its one deposit from several observers,
 * each event id delivered 1 to 3 times, a third of the events re-published
 * under a new event id, until `deliveries` is reached. Units are single
 * deliveries or pairs (two copies of one delivery handed to two workers at
 * the same moment), in random order.
 */
export function plan({ workflows: workflowCount, deliveries: total, seed }) {
  const rand = random(seed);
  // Each workflow's one deposit, which deposit-swap v3 keeps in its deposits map until the exchange.
  const deposits = Array.from({ length: workflowCount }, (_, i) => ({
    depositRef: `btc-mainnet:tx-${(i * 7919).toString(16)}:vout-${i % 3}`,
    amountUnits: `${(i + 1) * 1_000_003}00000000000`,
  }));
  const workflows = deposits.map((deposit, i) =>
    detectedSwap({ id: `wf-${i}`, revision: 3 + (i % 7), ...deposit, sequence: WATCHER_SEQUENCE.DEPOSIT_DETECTED }),
  );
  const events = [];
  const counts = { confirmations: 0, detections: 0, republished: 0 };
  let deliveries = 0;
  const add = (event, republished) => {
    const copies = Math.min(1 + Math.floor(rand() * 3), total - deliveries);
    events.push({ event, copies });
    deliveries += copies;
    counts[event.type === 'DEPOSIT_CONFIRMED' ? 'confirmations' : 'detections'] += 1;
    if (republished) counts.republished += 1;
  };
  for (let round = 0; deliveries < total; round += 1) {
    for (const [i, workflow] of workflows.entries()) {
      if (deliveries >= total) break;
      const type = rand() < 2 / 3 ? 'DEPOSIT_CONFIRMED' : 'DEPOSIT_DETECTED';
      // The watcher's detection of the deposit is its observation 1, its confirmation 2, whoever re-publishes them.
      const fields = { workflowId: workflow.id, type, ...deposits[i], sequence: WATCHER_SEQUENCE[type] };
      add({ eventId: `observer-${round % 4}:${workflow.id}:${round}`, ...fields }, false);
      if (deliveries < total && rand() < 1 / 3) add({ eventId: `republisher:${workflow.id}:${round}`, ...fields }, true);
    }
  }
  const units = [];
  let nextId = 0;
  let pairs = 0;
  for (const { event, copies } of events) {
    const copiesOf = Array.from({ length: copies }, () => ({ id: nextId++, event }));
    if (copies >= 2 && rand() < 0.5) {
      units.push(copiesOf.splice(0, 2));
      pairs += 1;
    }
    for (const delivery of copiesOf) units.push([delivery]);
  }
  return {
    workflows,
    units: shuffle(units, rand),
    eventIds: events.map(({ event }) => event.eventId),
    counts: { deliveries, eventIds: events.length, ...counts, pairs },
  };
}

/**
 * Runs every unit of `planned` through `workers` worker processes, each
 * holding at most `inFlight` deliveries. With `kills`, SIGKILLs a worker that
 * many times at random points (restarting it each time); its unacknowledged
 * deliveries go back to the front of the queue. A delivery nacked with a
 * retry disposition is redelivered after `retryDelayMs`; `stats.nacks`
 * counts them by `code/reason` (`uncoded` when the error was not an
 * IdemflowError), `stats.crashes` the workers that exited on their own.
 * `onAcked(acked)` is called after each acknowledgement (the fault tests
 * inject faults from it).
 */
export function run(
  planned,
  { workerConfig, workers: workerCount = 4, inFlight = 4, kills = 0, seed = 1, timeoutMs = 300_000, retryDelayMs = 0, onAcked = null },
) {
  const rand = random(seed ^ 0x5eed);
  const total = planned.counts.deliveries;
  const queue = planned.units.map((unit) => unit.slice());
  const stats = {
    acked: 0,
    outcomes: {},
    lostRaces: 0,
    retryNacks: 0,
    unexpected: [],
    kills: 0,
    redeliveredAfterKill: 0,
    restarts: 0,
    crashes: 0,
    nacks: {},
  };
  const killAt = Array.from({ length: kills }, () => Math.floor(total * (0.05 + 0.85 * rand()))).sort((a, b) => a - b);
  const slots = [];
  let finished = false;

  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => finish(new Error(`run did not finish in ${timeoutMs} ms (acked ${stats.acked} of ${total})`)),
      timeoutMs,
    );

    function finish(error) {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      const exits = slots.map(
        (slot) =>
          new Promise((done) => {
            if (!slot.child || slot.child.exitCode !== null || slot.child.signalCode !== null) return done();
            slot.child.once('exit', done);
            slot.child.send({ type: 'stop' }, () => {});
            setTimeout(() => slot.child.kill('SIGKILL'), 10_000).unref();
          }),
      );
      Promise.all(exits).then(() => (error ? reject(error) : resolve(stats)));
    }

    function start(slot) {
      const child = fork(WORKER, [], {
        env: { ...process.env, IDEMFLOW_WORKER_CONFIG: JSON.stringify(workerConfig) },
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      });
      slot.child = child;
      slot.ready = false;
      slot.inFlight = new Map();
      // A delivery sent to a worker that was just killed fails with EPIPE: its exit hands the delivery back.
      child.on('error', () => {});
      child.on('message', (message) => {
        if (message.type === 'ready') {
          slot.ready = true;
          pump();
        } else if (message.type === 'ack' || message.type === 'nack') {
          settle(slot, message);
        }
      });
      child.on('exit', (code, signal) => {
        if (finished) return;
        const lost = [...slot.inFlight.values()];
        slot.inFlight.clear();
        slot.ready = false;
        if (slot.killing) {
          slot.killing = false;
          stats.redeliveredAfterKill += lost.length;
        } else {
          stats.crashes += 1;
          stats.unexpected.push(`worker exited (${signal ?? code}) with ${lost.length} deliveries in flight`);
        }
        // Unacknowledged deliveries go back to the front, as a broker redelivers them.
        for (const delivery of lost.reverse()) queue.unshift([delivery]);
        stats.restarts += 1;
        start(slot);
      });
    }

    function settle(slot, message) {
      const delivery = slot.inFlight.get(message.id);
      if (!delivery) return;
      slot.inFlight.delete(message.id);
      stats.lostRaces += message.lostRaces;
      if (message.type === 'ack') {
        stats.acked += 1;
        stats.outcomes[message.outcome] = (stats.outcomes[message.outcome] ?? 0) + 1;
      } else if (message.disposition === 'retry') {
        stats.retryNacks += 1; // a retry disposition: the broker redelivers it later
        const kind = message.coded === false ? 'uncoded' : `${message.code}/${message.reason ?? '-'}`;
        stats.nacks[kind] = (stats.nacks[kind] ?? 0) + 1;
        if (retryDelayMs > 0) {
          setTimeout(() => {
            queue.push([delivery]);
            pump();
          }, retryDelayMs);
        } else {
          queue.push([delivery]);
        }
      } else {
        stats.acked += 1; // dead-lettered: counted, and it fails the run
        stats.unexpected.push(`${message.code}: ${message.message}`);
      }
      while (killAt.length > 0 && stats.acked >= killAt[0]) {
        killAt.shift();
        setTimeout(killOne, Math.floor(rand() * 15));
      }
      if (message.type === 'ack' && onAcked) onAcked(stats.acked);
      if (stats.acked === total) finish();
      else pump();
    }

    function killOne() {
      if (finished) return;
      const alive = slots.filter((slot) => slot.ready && !slot.killing);
      if (alive.length === 0) return;
      const busy = alive.filter((slot) => slot.inFlight.size > 0);
      const victim = (busy.length > 0 ? busy : alive)[Math.floor(rand() * (busy.length > 0 ? busy.length : alive.length))];
      victim.killing = true;
      victim.ready = false;
      stats.kills += 1;
      victim.child.kill('SIGKILL');
    }

    function pump() {
      while (queue.length > 0) {
        const unit = queue[0];
        const free = slots.filter((slot) => slot.ready && slot.inFlight.size < inFlight);
        if (free.length < unit.length) return;
        queue.shift();
        // Random free workers; a pair goes to two different ones at the same moment.
        shuffle(free, rand);
        unit.forEach((delivery, i) => {
          free[i].inFlight.set(delivery.id, delivery);
          free[i].child.send({ type: 'deliver', id: delivery.id, event: delivery.event }, () => {});
        });
      }
    }

    for (let i = 0; i < workerCount; i += 1) {
      const slot = { index: i };
      slots.push(slot);
      start(slot);
    }
  });
}
