// idemflow/kysely for ES modules: the same objects as kysely.cjs.
import kysely from './kysely.cjs';

export const { withKysely, kyselyOf } = kysely;

export default kysely;
