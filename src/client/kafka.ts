/**
 * `msgbridge/client/kafka`: waiting for a request's result on `send-results` itself (no tracker
 * needed). It loads kafkajs, which `msgbridge/client` does not; the code lives in src/kafka, the
 * one room that knows a Kafka client.
 */
export {
  followSendResults,
  waitForResult,
  ResultFollower,
  type FollowSendResultsOptions,
  type KafkaConnection,
  type WaitForResultOptions,
} from '../kafka/result-follower.js';
export { ResultWaitError, type WaitFailure } from '../platform/wait-error.js';
export type { SendResult, AcceptedSendResult, RejectedSendResult, ExpiredSendResult } from '../contracts/send.js';
