// idemflow/redis for ES modules: the same objects as index.cjs.
import adapter from './index.cjs';

export const { RedisStore, RedisTransaction, DEFAULT_TABLES, STORE_UNAVAILABLE, isStoreUnavailable } = adapter;

export default adapter;
