// An API server in a process of its own, for the HTTP process tests: the app
// of workers/http-apps.mjs on `framework` over a SQLite file or PostgreSQL
// tables, with the host's `orders` table. It tells its parent
// `{ listening: port }`, then `{ ran: run }` each time the order handler has
// written its row (so the parent can SIGKILL it mid-request).
// argv: JSON { framework, kind, file?, url?, tables, hostTable, quiet? }
// (`quiet`: no message per run, for the bench).
import { createApp, hostTable } from './http-apps.mjs';

const { framework, kind, file, url, tables, hostTable: hostName, quiet = false } = JSON.parse(process.argv[2]);

let store;
let close;
if (kind === 'sqlite') {
  const { SqliteStore } = await import('idemflow/sqlite');
  store = SqliteStore.open(file, { tables });
  close = () => store.close();
} else {
  const { default: pg } = await import('pg');
  const { PostgresStore } = await import('idemflow/postgres');
  const pool = new pg.Pool({ connectionString: url, max: 8 });
  store = new PostgresStore(pool, { tables });
  close = () => pool.end();
}
await store.migrate();
const host = hostTable(kind, store, hostName);
await host.create();
const app = createApp(framework, store, { host });
if (!quiet) app.state.onRun = (run) => process.send({ ran: run });
const port = await app.listen();
process.send({ listening: port });
process.on('message', async (message) => {
  if (message === 'stop') {
    await app.close();
    await close();
    process.exit(0);
  }
});
