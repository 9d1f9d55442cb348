// Types of the HTTP layer: the webhook receiver, HMAC signatures, the Idempotency-Key middleware's options.

import type { IdemflowError } from '../core/types.js';
import type { DeliveryContext, DeliveryHandler, KeyedTransaction, Store } from '../host/types.js';

/** What a webhook request is to the receiver: the raw body's bytes and the headers (lowercase names). */
export interface WebhookRequest {
  method?: string;
  headers: Readonly<Record<string, string | string[] | undefined>>;
  body: Uint8Array;
}

/** An answer of the HTTP layer: status, headers and the body to send. */
export interface HttpAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export type SignatureVerdict = boolean | { ok: true } | { ok: false; reason: string };

export interface WebhookReceiverOptions {
  /** Checks the raw body's signature before anything is parsed or stored (stripeSignature, standardWebhooksSignature); false accepts unsigned requests. */
  verify: ((request: WebhookRequest) => SignatureVerdict | Promise<SignatureVerdict>) | false;
  /** Stores a delivery a person must look at; the receiver answers 200 once it resolves, 503 if it throws. */
  park: (delivery: { body: Uint8Array; headers: WebhookRequest['headers']; error: IdemflowError }) => unknown | Promise<unknown>;
  /** The largest raw body read (default 65536): 413 beyond. */
  maxBytes?: number;
  /** The delivery's context for the handler (its delivery count, metadata). */
  context?: (request: { headers: WebhookRequest['headers'] }) => DeliveryContext;
}

/**
 * A Node request listener (node:http, Express: `app.post(path, receiver)`) that
 * answers ack 200, retry 503 with Retry-After, dead-letter 400, park 200 (after
 * parking), a refused signature 401, too large 413.
 */
export interface WebhookReceiver {
  (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse, next?: (error?: unknown) => void): Promise<void>;
  /** The same answer for any framework: the raw body in, `{ status, headers, body }` out. */
  receive(request: WebhookRequest): Promise<HttpAnswer>;
  readonly maxBytes: number;
}

export function createWebhookReceiver(handle: DeliveryHandler, options: WebhookReceiverOptions): WebhookReceiver;

export type SignatureSecret = string | Uint8Array | ReadonlyArray<string | Uint8Array>;

export interface StripeSignatureOptions {
  /** The endpoint's secret (`whsec_…`, used as it is), or several while one is rotated. */
  secret: SignatureSecret;
  /** The header that carries `t=<unix seconds>,v1=<hex>` (default 'stripe-signature'). */
  header?: string;
  /** How far the signed time may be from now, either way (default 300 s). */
  toleranceSeconds?: number;
  now?: () => number;
}

/** A verify hook: Stripe's scheme, HMAC-SHA256 of "<t>.<raw body>", compared in constant time; reasons 'missing', 'malformed', 'stale', 'mismatch'. */
export function stripeSignature(options: StripeSignatureOptions): (request: WebhookRequest) => SignatureVerdict;
/** The `Stripe-Signature` value a sender writes for `body` at `timestamp` (unix seconds, default now): one v1 per secret. */
export function signStripe(body: string | Uint8Array, options: { secret: SignatureSecret; timestamp?: number }): string;

export interface StandardWebhooksSignatureOptions {
  /** `whsec_` + base64 (the key's bytes as a Buffer also do), or several while one is rotated. */
  secret: SignatureSecret;
  /** How far `webhook-timestamp` may be from now, either way (default 300 s). */
  toleranceSeconds?: number;
  now?: () => number;
}

/** A verify hook: Standard Webhooks, `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<raw body>">`; reasons 'missing', 'malformed', 'stale', 'mismatch'. */
export function standardWebhooksSignature(options: StandardWebhooksSignatureOptions): (request: WebhookRequest) => SignatureVerdict;
/** The headers a Standard Webhooks sender writes for `body`: one `v1,` signature per secret. */
export function signStandardWebhook(
  body: string | Uint8Array,
  options: { secret: SignatureSecret; id: string; timestamp?: number },
): { 'webhook-id': string; 'webhook-timestamp': string; 'webhook-signature': string };

/** Options of the Idempotency-Key middleware (idemflow/express, idemflow/fastify); docs/http.md. */
export interface IdempotencyOptions<Request = unknown> {
  store: Store;
  /** The request header (default 'Idempotency-Key'). */
  header?: string;
  /** 400 without the header (default false: such a request runs as usual). */
  required?: boolean;
  /** The methods it covers (default POST and PATCH). */
  methods?: string[];
  /** Response headers kept with the status and body for replays (default content-type, location). */
  storeHeaders?: string[];
  /** The header a replay carries, `true` (default 'Idempotent-Replayed'). */
  replayHeader?: string;
  /** How long a request waits for another with its key still running before 409 (default 0). */
  waitMs?: number;
  /** The Retry-After of a 409, in ms (rounded up to seconds; default 1000). */
  retryAfterMs?: number;
  /** The largest request body fingerprinted (default 1 MiB): 413 beyond. */
  maxBodyBytes?: number;
  /** The largest response body kept (default 256 KiB): a larger answer is a 500 and nothing is kept. */
  maxResponseBytes?: number;
  /**
   * Whose keys these are (required): a function of the framework's own request (Express `req`,
   * Fastify `request`, after the app's hooks ran) answering the caller's id (an account, a tenant)
   * as a non-empty string, or 'global' for a service whose callers share one key space.
   */
  scope: ((request: Request) => string | Promise<string>) | 'global';
}

/** What the handler of a request with a key gets (`req.idempotency`, `request.idempotency`). */
export interface IdempotencyContext {
  /** The client's key. */
  readonly key: string;
  /** The keyed transaction: the stored response commits in it. */
  readonly tx: KeyedTransaction;
  /** tx.client: the driver's handle bound to the transaction, for the handler's own writes. */
  readonly client: unknown;
  /** Keep this answer even when it is a 5xx (otherwise a 5xx leaves the key free for the retry). */
  final(): void;
}
