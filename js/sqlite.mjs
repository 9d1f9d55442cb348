// idemflow/sqlite for ES modules: the same objects as sqlite.cjs.
import adapter from './sqlite.cjs';

export const { SqliteStore, SqliteTransaction, DEFAULT_TABLES, STORE_UNAVAILABLE, isStoreUnavailable } = adapter;

export default adapter;
