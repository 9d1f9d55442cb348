// A test harness, not a store to use: InMemoryStore's tables kept in a JSON
// file, every call made under an exclusive lock file, so that separate
// processes share one outbox. It lets the in-memory entry of the outbox
// suite run the process tests (a SIGKILLed consumer, racing consumers); the
// durable backends run them on their databases.
import fs from 'node:fs';
import { InMemoryStore } from 'idemflow';

const METHODS = [
  'claimOperations',
  'renewLease',
  'completeOperation',
  'failOperation',
  'releaseOperation',
  'requeue',
  'requeueOperations',
  'releaseOwner',
  'stats',
  'listOperations',
  'purgeReceipts',
  'purgeOperations',
  'getOperation',
  'getWorkflow',
  'getReceipt',
];
const LOCK_WAIT_MS = 10_000;
const pause = new Int32Array(new SharedArrayBuffer(4));

function save(file, store) {
  const tables = store.snapshot();
  const json = JSON.stringify(Object.fromEntries(Object.entries(tables).map(([name, rows]) => [name, [...rows]])));
  fs.writeFileSync(`${file}.tmp`, json);
  fs.renameSync(`${file}.tmp`, file);
}

export class FileStore {
  #file;
  #clock;
  #tail = Promise.resolve();

  constructor(file, { now }) {
    this.#file = file;
    this.#clock = now;
    for (const method of METHODS) this[method] = (...args) => this.#locked((store) => store[method](...args));
  }

  /** Writes a new store file holding `workflows`. */
  static create(file, workflows, options) {
    save(file, new InMemoryStore(workflows));
    return new FileStore(file, options);
  }

  now() {
    return this.#clock();
  }

  transaction(fn) {
    return this.#locked((store) => store.transaction(fn));
  }

  /** Calls run one after another in this process, and alone across processes. */
  #locked(fn) {
    const run = this.#tail.then(async () => {
      this.#lock();
      try {
        const store = InMemoryStore.fromSnapshot(JSON.parse(fs.readFileSync(this.#file, 'utf8')), { now: this.#clock });
        const result = await fn(store);
        save(this.#file, store);
        return result;
      } finally {
        fs.rmSync(`${this.#file}.lock`, { force: true });
      }
    });
    this.#tail = run.then(
      () => undefined,
      () => undefined,
    );
    return run;
  }

  #lock() {
    for (let waited = 0; ; waited += 2) {
      try {
        fs.closeSync(fs.openSync(`${this.#file}.lock`, 'wx'));
        return;
      } catch (error) {
        if (error.code !== 'EEXIST' || waited > LOCK_WAIT_MS) throw error;
        Atomics.wait(pause, 0, 0, 2);
      }
    }
  }
}
