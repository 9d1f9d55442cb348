// idemflow/mongodb for ES modules: the same objects as mongodb.cjs.
import adapter from './mongodb.cjs';

export const { MongoStore, MongoTransaction, DEFAULT_TABLES, STORE_UNAVAILABLE, isStoreUnavailable } = adapter;

export default adapter;
