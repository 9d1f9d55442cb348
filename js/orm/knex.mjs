// idemflow/knex for ES modules: the same objects as knex.cjs.
import knex from './knex.cjs';

export const { withKnex, knexTransaction } = knex;

export default knex;
