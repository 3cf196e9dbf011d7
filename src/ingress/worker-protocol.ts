import type { Config } from '../config/schema.js';
import type { Metrics } from './worker-metrics.js';

/**
 * What the main thread (worker-supervisor.ts) and each worker thread (worker-entry.ts) say to
 * each other, and what a worker starts with. In a file of its own so that both sides import
 * the same types and neither imports the other.
 */

/** Main thread → worker. */
export type ToWorker = { type: 'collect'; id: number } | { type: 'drain' } | { type: 'reload' } | { type: 'close-now' };

/** Worker → main thread. */
export type FromWorker =
  | { type: 'listening'; port: number }
  | { type: 'start-failed'; code?: string; message: string }
  | { type: 'collected'; id: number; metrics: Metrics }
  | { type: 'drained'; ok: boolean; error?: string }
  | { type: 'crashed'; error: string };

export interface IngressWorkerData {
  config: Config;
  /** 0-based; the worker's label is index + 1. */
  index: number;
  port: number;
  brokers: string[];
  /** One Int32 per worker: 1 when that worker is ready on its own (the main thread's /readyz reads them all). */
  slots: SharedArrayBuffer;
  unsafeDiscardRecords: boolean;
}
