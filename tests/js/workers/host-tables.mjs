// The host's own table on every backend, written through a transaction's
// tx.client (tx.table on the in-memory store, tx.session on MongoDB): what
// the own-writes and keyed-mode suites commit beside idemflow's records.

/**
 * The host's `shipments` table on a backend: `create()`, `insert(tx, eventId,
 * orderId)` through tx.client (tx.table for memory, tx.session for MongoDB),
 * answering the shipment's id, and `count()` of committed rows.
 */
export function shipmentsOf(kind, helper, name) {
  const { store } = helper;
  switch (kind) {
    case 'memory':
      return {
        create: async () => {},
        insert: (tx, eventId, orderId) => {
          const table = tx.table(name);
          const id = table.size + 1;
          table.set(eventId, { id, orderId });
          return id;
        },
        count: async () => store.snapshot().tables.get(name)?.size ?? 0,
      };
    case 'sqlite':
    case 'sqlite-node':
      return {
        create: async () =>
          store.db.exec(`CREATE TABLE "${name}" (id INTEGER PRIMARY KEY, event_id TEXT UNIQUE NOT NULL, order_id TEXT NOT NULL)`),
        insert: (tx, eventId, orderId) =>
          Number(tx.client.prepare(`INSERT INTO "${name}" (event_id, order_id) VALUES (?, ?)`).run(eventId, orderId).lastInsertRowid),
        count: async () => Number(store.db.prepare(`SELECT COUNT(*) AS n FROM "${name}"`).get().n),
      };
    case 'pglite':
    case 'pg':
      return {
        create: () =>
          helper.query(`CREATE TABLE "${name}" (id SERIAL PRIMARY KEY, event_id TEXT UNIQUE NOT NULL, order_id TEXT NOT NULL)`, []),
        insert: async (tx, eventId, orderId) =>
          (await tx.client.query(`INSERT INTO "${name}" (event_id, order_id) VALUES ($1, $2) RETURNING id`, [eventId, orderId])).rows[0].id,
        count: async () => Number((await helper.query(`SELECT COUNT(*) AS n FROM "${name}"`, []))[0].n),
      };
    case 'mysql':
      return {
        create: () =>
          helper.query(
            `CREATE TABLE \`${name}\` (id INT AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(200) UNIQUE NOT NULL, order_id VARCHAR(200) NOT NULL) ENGINE=InnoDB`,
            [],
          ),
        insert: async (tx, eventId, orderId) =>
          (await tx.client.query(`INSERT INTO \`${name}\` (event_id, order_id) VALUES (?, ?)`, [eventId, orderId]))[0].insertId,
        count: async () => Number((await helper.query(`SELECT COUNT(*) AS n FROM \`${name}\``, []))[0].n),
      };
    case 'mongodb-fake':
    case 'mongodb':
      return {
        create: async () => {},
        insert: async (tx, eventId, orderId) => {
          await tx.client
            .db(store.db.databaseName ?? 'suites')
            .collection(name)
            .insertOne({ _id: eventId, orderId }, { session: tx.session });
          return eventId;
        },
        count: () => store.db.collection(name).countDocuments(),
      };
    case 'redis':
      // A hash per shipment and a set of their event ids, queued through tx.client into idemflow's commit.
      return {
        create: async () => {},
        insert: (tx, eventId, orderId) => {
          tx.client.hset(`${name}:${eventId}`, { orderId });
          tx.client.sadd(name, eventId);
          return eventId;
        },
        count: async () => Number(await store.client.sCard(name)),
      };
    default:
      throw new Error(`no shipments table for ${kind}`);
  }
}

/** TypeORM's entity of the host's shipments table `table` (the columns above), made with typeorm's EntitySchema. */
export function typeormShipments(EntitySchema, table) {
  return new EntitySchema({
    name: 'Shipment',
    tableName: table,
    columns: {
      id: { type: Number, primary: true, generated: true },
      eventId: { type: String, name: 'event_id' },
      orderId: { type: String, name: 'order_id' },
    },
  });
}
