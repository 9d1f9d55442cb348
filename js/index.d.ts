// Types of the idemflow package, by layer. Both entry points (import and
// require) export these names.

export * from './adapters/memory/index.js';
export * from './core/types.js';
export * from './host/types.js';
export * from './http/types.js';
export * from './outbox/types.js';
