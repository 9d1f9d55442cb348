// idemflow/postgres for ES modules: the same objects as postgres.cjs.
import adapter from './postgres.cjs';

export const { PostgresStore, PostgresTransaction, DEFAULT_TABLES, STORE_UNAVAILABLE, isStoreUnavailable } = adapter;

export default adapter;
