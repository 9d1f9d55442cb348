// idemflow/sqlite for ES modules: the same objects as index.cjs.
import adapter from './index.cjs';

export const { SqliteStore, SqliteTransaction, DEFAULT_TABLES, STORE_UNAVAILABLE, isStoreUnavailable } = adapter;

export default adapter;
