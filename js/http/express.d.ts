// idemflow/express: the Idempotency-Key middleware for Express and any connect-style stack over node:http.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { IdempotencyContext, IdempotencyOptions } from './types.js';

export type { IdempotencyContext, IdempotencyOptions } from './types.js';

/** A request the middleware has seen: the client's bytes, and the keyed context when it runs the handler. */
export interface IdempotentRequest extends IncomingMessage {
  idempotency?: IdempotencyContext;
  rawBody?: Buffer;
  body?: unknown;
  originalUrl?: string;
}

declare global {
  namespace Express {
    interface Request {
      /** Set by idemflow's idempotency(): write through `client`; `final()` keeps a 5xx. */
      idempotency?: IdempotencyContext;
      /** The body's bytes as the client sent them (idemflow's idempotency() or rawBody). */
      rawBody?: Buffer;
    }
  }
}

export type IdempotencyMiddleware = (req: IncomingMessage, res: ServerResponse, next: (error?: unknown) => void) => Promise<void>;

/** The middleware: `app.post('/orders', idempotency({ store, required: true }), handler)`. */
export function idempotency(options: IdempotencyOptions<IdempotentRequest & Express.Request>): IdempotencyMiddleware;

/** A body parser's `verify` that keeps the client's bytes: `express.json({ verify: rawBody })`. */
export function rawBody(req: IncomingMessage, res: ServerResponse, buffer: Buffer): void;
