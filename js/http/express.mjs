// idemflow/express for ES modules: the same objects as express.cjs.
import express from './express.cjs';

export const { idempotency, rawBody } = express;

export default express;
