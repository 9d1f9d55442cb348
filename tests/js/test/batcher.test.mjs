// createBatcher: the batching the example workers use, as the package exports it.

import assert from 'node:assert/strict';
import test from 'node:test';
import { createBatcher, IdemflowError } from 'idemflow';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test('a batch goes when it holds size items, or lingerMs after its first item', async () => {
  const batches = [];
  const batcher = createBatcher({
    size: 3,
    lingerMs: 20,
    run: (items) => {
      batches.push(items);
    },
  });
  for (const item of [1, 2, 3, 4]) await batcher.push(item);
  assert.deepEqual(batches, [[1, 2, 3]], 'a full batch goes at once');
  assert.equal(batcher.held, 1);
  await sleep(60);
  assert.deepEqual(batches, [[1, 2, 3], [4]], 'the rest goes after the linger');
  assert.equal(batcher.held, 0);
});

test('while a batch runs, the next one fills and goes as soon as it settles, not after the idle linger', async () => {
  const batches = [];
  const releases = [];
  const batcher = createBatcher({
    size: 100,
    lingerMs: 0,
    maxLingerMs: 60_000,
    run: (items) => {
      batches.push(items);
      return new Promise((resolve) => releases.push(resolve));
    },
  });
  await batcher.push(0);
  await sleep(5);
  assert.deepEqual(batches, [[0]], 'with nothing running, a lone item goes after lingerMs');
  for (let i = 1; i <= 30; i += 1) await batcher.push(i);
  await sleep(20);
  assert.equal(batches.length, 1, 'a partial batch waits while another runs');
  assert.equal(batcher.held, 30);
  releases.shift()();
  await sleep(5);
  assert.equal(batches.length, 2, 'the running batch settled: what filled meanwhile goes at once');
  assert.equal(batches[1].length, 30);
  assert.deepEqual(batcher.sent, { batches: 2, items: 31 });
  releases.shift()();
  await batcher.drain();
});

test('a partial batch waits for a running one at most maxLingerMs; a full one never waits', async () => {
  const batches = [];
  const releases = [];
  const batcher = createBatcher({
    size: 3,
    window: 12,
    lingerMs: 0,
    maxLingerMs: 30,
    run: (items) => {
      batches.push(items);
      return new Promise((resolve) => releases.push(resolve));
    },
  });
  for (const item of [1, 2, 3, 4, 5, 6, 7]) await batcher.push(item);
  assert.deepEqual(
    batches,
    [
      [1, 2, 3],
      [4, 5, 6],
    ],
    'full batches go at once, while others run',
  );
  await sleep(10);
  assert.equal(batches.length, 2, 'the partial batch is within its maxLingerMs');
  await sleep(60);
  assert.deepEqual(batches.at(-1), [7], 'past maxLingerMs it goes although batches still run');
  for (const release of releases) release();
  await batcher.drain();
});

test('the window defaults to twice the size, so one batch fills while another runs', async () => {
  const releases = [];
  let hold = true;
  const batcher = createBatcher({ size: 2, lingerMs: 1000, run: () => hold && new Promise((resolve) => releases.push(resolve)) });
  for (const item of ['a', 'b', 'c', 'd']) await batcher.push(item);
  assert.equal(batcher.running, 4);
  let taken = false;
  const fifth = batcher.push('e').then(() => {
    taken = true;
  });
  await sleep(10);
  assert.equal(taken, false, 'the default window of 4 is full');
  releases.shift()();
  await fifth;
  hold = false;
  for (const release of releases) release();
  await batcher.drain();
  assert.deepEqual(batcher.sent, { batches: 3, items: 5 });
});

test('push waits while the window is full, and goes on as batches settle', async () => {
  const releases = [];
  const batcher = createBatcher({ size: 2, window: 4, lingerMs: 1000, run: () => new Promise((resolve) => releases.push(resolve)) });
  await batcher.push('a');
  await batcher.push('b');
  await batcher.push('c');
  await batcher.push('d');
  assert.equal(batcher.running, 4);
  let taken = false;
  const fifth = batcher.push('e').then(() => {
    taken = true;
  });
  await sleep(10);
  assert.equal(taken, false, 'no room: the fifth item waits');
  releases.shift()();
  await fifth;
  assert.equal(taken, true);
  assert.equal(batcher.held, 1);
  assert.equal(batcher.running, 2);
  for (const release of releases) release();
});

test('drain sends what is held and resolves once every batch has settled; a batch that throws goes to onError', async () => {
  const settled = [];
  const batcher = createBatcher({
    size: 10,
    lingerMs: 10_000,
    run: async (items) => {
      await sleep(30);
      if (items.includes('bad')) throw new Error('this batch failed');
      settled.push(...items);
    },
  });
  await batcher.push('x');
  await batcher.push('y');
  const started = performance.now();
  await batcher.drain();
  assert.deepEqual(settled, ['x', 'y'], 'held items went at once, not after the linger');
  assert.ok(performance.now() - started < 5000);
  const heard = [];
  const failing = createBatcher({
    size: 1,
    run: async () => {
      await sleep(5);
      throw new Error('no');
    },
    onError: (error, items) => heard.push([error.message, items]),
  });
  await failing.push('bad');
  await failing.drain();
  assert.equal(failing.running, 0);
  assert.deepEqual(heard, [['no', ['bad']]], 'a batch that throws is handed to onError with its items');
});

test('bad options are a fatal INVALID_ARGUMENT naming the option', () => {
  const run = () => {};
  for (const [options, field] of [
    [{ size: 0, run }, 'size'],
    [{ size: 1.5, run }, 'size'],
    [{ size: 2, lingerMs: -1, run }, 'lingerMs'],
    [{ size: 4, window: 3, run }, 'window'],
    [{ size: 2, lingerMs: 20, maxLingerMs: 10, run }, 'maxLingerMs'],
    [{ size: 2 }, 'run'],
    [{ size: 2, run, linger: 5 }, 'linger'],
    [{ size: 2, run, onError: 'log' }, 'onError'],
  ]) {
    assert.throws(
      () => createBatcher(options),
      (error) => {
        assert.ok(error instanceof IdemflowError);
        assert.equal(error.code, 'INVALID_ARGUMENT');
        assert.equal(error.details.field, field);
        return true;
      },
      JSON.stringify(options),
    );
  }
});
