'use strict';
// idemflow/testing: helpers for a team's own tests of its rule sets (node:test, Vitest, Jest alike).

const { exploreOrders, assertEveryOrder } = require('./orders.cjs');

module.exports = { exploreOrders, assertEveryOrder };
