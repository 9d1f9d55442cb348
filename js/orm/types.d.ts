// Types the tools' entry points share (idemflow/drizzle, idemflow/kysely, idemflow/knex).
import type { JsonValue } from '../core/types.js';
import type { AppliedDecision } from '../host/types.js';

/**
 * The callback of withDrizzle / withKysely / withKnex: the tool's own object bound to
 * idemflow's transaction, and the decision (undefined when it runs as idempotent()'s work).
 * It returns the output (a JSON value), or a query of the tool's, unawaited, whose result
 * is the output when it is a JSON value (the rows of a RETURNING) and none otherwise.
 */
export type BoundCallback<Db> = (db: Db, decision: AppliedDecision) => unknown;

/** What withDrizzle / withKysely / withKnex return: an onApplied, and idempotent()'s work. */
// biome-ignore lint/suspicious/noExplicitAny: any store's transaction (a SQL store's, checked when it runs)
// biome-ignore lint/suspicious/noConfusingVoidType: a callback that returns nothing keeps no output
export type BoundHandler = (tx: any, decision?: AppliedDecision) => Promise<JsonValue | void>;
