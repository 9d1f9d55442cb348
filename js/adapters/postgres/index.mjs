// idemflow/postgres for ES modules: the same objects as index.cjs.
import adapter from './index.cjs';

export const { PostgresStore, PostgresTransaction, DEFAULT_TABLES, STORE_UNAVAILABLE, isStoreUnavailable } = adapter;

export default adapter;
