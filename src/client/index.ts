/**
 * `msgbridge/client`: what a service that requests sends needs, light enough to import anywhere
 * (zod and the contracts; no Kafka client, no uWebSockets.js, no LMDB: test/client checks it).
 * The record is produced with the service's own Kafka producer; the result is awaited from a
 * tracker here, or from `send-results` with `msgbridge/client/kafka` (which loads kafkajs).
 * docs/producers.md is the guide, for other languages too.
 */
export {
  DEFAULT_SEND_REQUESTS_TOPIC,
  parseSendRequest,
  sendRequestRecord,
  SendRequestInvalidError,
  type SendRequestRecord,
  type SendRequestRecordOptions,
} from '../contracts/send-record.js';
export { waitForRequest, type RequestAnswer, type WaitForRequestOptions } from './tracker.js';
export { partitionOf } from './partition.js';
export { ResultWaitError, type WaitFailure } from '../platform/wait-error.js';
export type {
  SendRequest,
  TextSendRequest,
  TemplateSendRequest,
  SendResult,
  AcceptedSendResult,
  RejectedSendResult,
  ExpiredSendResult,
} from '../contracts/send.js';
export type { MessageState, MessageStatus } from '../contracts/message-state.js';
export type { RequestOutcome } from '../contracts/request-outcome.js';
