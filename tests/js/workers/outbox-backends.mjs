// The stores the outbox suite runs on: one entry per backend of the
// conformance suite. Server backends skip with one line when their URL is not
// set; `processes` says why a backend cannot be shared with other processes
// at all, `racing` why not with several at once. `setup()` gives an environment:
//   open(workflows, clock, { connections }) a store over fresh tables holding `workflows`
//   another(clock)                          a second store, with its own connection, over the same tables
//   openShared(workflows, clock)            tables a consumer process opens too (the crash test):
//                                           { store, spec, beforeChild(), afterChild() → store }
//   corrupt(store, which, key, values)      writes raw values (named by SQL column) into a stored row behind
//                                           the store's back; resolves the store to go on with (the in-memory
//                                           store is rebuilt from a snapshot holding the row)
//   cleanup()                               after each test: drop its tables, close its connections
//   close()                                 after the suite
// A consumer process opens the shared tables with openSpec(spec, now).
import fs from 'node:fs';
import path from 'node:path';
import { InMemoryStore } from 'idemflow';
import { BACKENDS, documentField, openStore, tablesFor, tempDir, uniquePrefix } from './backends.mjs';
import { FileStore } from './outbox-file-store.mjs';

async function filled(store, workflows) {
  await store.migrate?.();
  for (const workflow of workflows) await store.putWorkflow(workflow);
  return store;
}

/**
 * An environment over `connect(tables, clock, options)` → a helper
 * `{ store, drop(), close() }` (backends.mjs), and `spec(tables)` → what
 * another process needs to open the same tables.
 */
function durable(connect, spec) {
  let opened = [];
  let cleanups = [];
  let tables = null;
  const track = async (clock, options) => {
    const helper = await connect(tables, clock, options);
    opened.push(helper);
    return helper.store;
  };
  return {
    async open(workflows, clock, options = {}) {
      tables = tablesFor(uniquePrefix());
      return filled(await track(clock, options), workflows);
    },
    another: (clock) => track(clock, {}),
    async corrupt(store, which, key, values) {
      if (!(await opened[0].setRaw(which, key, values)))
        throw new Error(`the ${which} table did not take ${JSON.stringify(values)} as given`);
      return store;
    },
    async openShared(workflows, clock) {
      const store = await this.open(workflows, clock);
      return { store, spec: spec(tables), beforeChild: async () => {}, afterChild: async () => store };
    },
    /** Runs `fn` at the next cleanup. */
    onCleanup(fn) {
      cleanups.push(fn);
    },
    async cleanup() {
      const helpers = opened;
      const extra = cleanups;
      opened = [];
      cleanups = [];
      if (helpers.length > 0) await helpers[0].drop();
      for (const helper of helpers.reverse()) await helper.close();
      for (const fn of extra) await fn();
    },
    close: async () => {},
  };
}

// The outbox suite's own environment where a backend needs one (`setup(backend)`
// gives the backend's setup): the
// in-memory store (a file stands in for tables other processes share) and
// PGlite (one process's database, handed to the consumer process in turn).
const SPECIAL = {
  memory: {
    name: 'in-memory',
    setup: () => async () => {
      const dir = tempDir('outbox-memory');
      let current = null;
      let now = null;
      return {
        open: async (workflows, clock) => {
          now = clock.now;
          current = new InMemoryStore(workflows, { now });
          return current;
        },
        another: async () => current,
        // The in-memory store holds what a snapshot (say from a file another process wrote) gives it.
        corrupt: async (store, which, key, values) => {
          const snapshot = store.snapshot();
          const row = snapshot[which].get(key);
          for (const [column, value] of Object.entries(values)) row[documentField(column)] = value;
          current = InMemoryStore.fromSnapshot(snapshot, { now });
          return current;
        },
        // In-memory tables cannot cross processes: a locked JSON file holds them (a test harness only).
        openShared: async (workflows, clock) => {
          const file = path.join(dir, `${uniquePrefix()}.json`);
          const store = FileStore.create(file, workflows, { now: clock.now });
          return { store, spec: { kind: 'file', file }, beforeChild: async () => {}, afterChild: async () => store };
        },
        cleanup: async () => {},
        close: async () => fs.rmSync(dir, { recursive: true, force: true }),
      };
    },
  },
  pglite: {
    racing: "PGlite is one process's database: processes take turns with it, they cannot race on it (two consumers race in process above)",
    setup: (backend) => async () => {
      const shared = await backend.setup();
      const env = durable(
        (tables, clock) => shared.open(tables, { now: clock.now }),
        () => null,
      );
      return {
        ...env,
        // PGlite is one process's database: the consumer process gets the data directory while the test has it closed.
        async openShared(workflows, clock) {
          const dir = tempDir('outbox-pglite');
          const spec = { kind: 'pglite', dir, tables: tablesFor(uniquePrefix()) };
          let current = await openSpec(spec, clock.now);
          let held = true;
          env.onCleanup(async () => {
            if (held) await current.close();
            fs.rmSync(dir, { recursive: true, force: true });
          });
          await filled(current.store, workflows);
          return {
            store: current.store,
            spec,
            beforeChild: async () => {
              held = false;
              await current.close();
            },
            afterChild: async () => {
              current = await openSpec(spec, clock.now);
              held = true;
              return current.store;
            },
          };
        },
        close: () => shared.close(),
      };
    },
  },
  'mongodb-fake': {
    processes: 'the fake lives inside one process; the MongoDB server suite runs this when IDEMFLOW_MONGODB_URL is set',
  },
};

/** Every backend of workers/backends.mjs; a durable one over fresh tables per test, shared with other processes by its spec. */
export const backends = BACKENDS.map((backend) => {
  const special = SPECIAL[backend.id] ?? {};
  const setup = special.setup?.(backend);
  return {
    id: backend.id,
    name: special.name ?? backend.name,
    skip: backend.skip ?? false,
    racing: special.racing,
    processes: special.processes,
    setup:
      setup ??
      (async () => {
        const env = await backend.setup();
        const outbox = durable(
          (tables, clock, { connections } = {}) => env.open(tables, { now: clock.now, poolSize: connections }),
          (tables) => env.spec(tables),
        );
        return { ...outbox, close: () => env.close() };
      }),
  };
});

/** Opens the shared tables of `spec` with a fixed clock: `{ store, close() }`. */
export async function openSpec(spec, now) {
  switch (spec.kind) {
    case 'file':
      return { store: new FileStore(spec.file, { now }), close: async () => {} };
    case 'pglite': {
      const { PGlite } = await import('@electric-sql/pglite');
      const { PostgresStore } = await import('idemflow/postgres');
      const db = new PGlite(spec.dir);
      await db.waitReady;
      return { store: new PostgresStore(db, { tables: spec.tables, now }), close: () => db.close() };
    }
    default: {
      const helper = await openStore(spec.kind, { tables: spec.tables, file: spec.file, url: spec.url, now, poolSize: 1 });
      return { store: helper.store, close: () => helper.close() };
    }
  }
}
