// idemflow/drizzle for ES modules: the same objects as drizzle.cjs.
import drizzle from './drizzle.cjs';

export const { withDrizzle, drizzleOf } = drizzle;

export default drizzle;
