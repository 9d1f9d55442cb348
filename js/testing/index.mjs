// idemflow/testing for ES modules: the same objects as index.cjs.
import testing from './index.cjs';

export const { exploreOrders, assertEveryOrder } = testing;

export default testing;
