// idemflow/mysql for ES modules: the same objects as mysql.cjs.
import adapter from './mysql.cjs';

export const { MysqlStore, MysqlTransaction, DEFAULT_TABLES, STORE_UNAVAILABLE, isStoreUnavailable } = adapter;

export default adapter;
