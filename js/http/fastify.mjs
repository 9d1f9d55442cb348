// idemflow/fastify for ES modules: the same objects as fastify.cjs.
import fastify from './fastify.cjs';

export const { idempotency, webhook } = fastify;

export default fastify;
