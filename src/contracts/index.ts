export * from './common.js';
export * from './webhook-events.js';
export * from './send.js';
export * from './provider-api.js';
export * from './headers.js';
