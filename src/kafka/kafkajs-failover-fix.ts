import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import { errorMessage } from '../platform/errors.js';

/**
 * Lets a kafkajs 2.2.4 consumer-group member ride out the loss or freeze of one broker without
 * crashing, restarting or rebalancing its group, as the Java client does: a fetch from an
 * unreachable leader returns nothing and refreshes the metadata, a moved leader refreshes it
 * without a rejoin, a lost coordinator is looked up again. What kafkajs did instead and what was
 * measured: src/kafka/README.md, "Losing a broker". `beforeRejoin` gives a member a moment before
 * it rejoins, as the Java client's onPartitionsRevoked (src/sender/README.md, "Sent once").
 */

interface KafkaError extends Error {
  type?: string;
  code?: string;
  retriable?: boolean;
  originalError?: KafkaError;
}

interface Cluster {
  refreshMetadata(): Promise<void>;
  findGroupCoordinator(options: { groupId: string }): Promise<unknown>;
}

interface ConsumerGroupInstance {
  groupId: string;
  memberId: string | null;
  cluster: Cluster;
  coordinator: unknown;
  offsetManager: { coordinator: unknown } | null;
  maxWaitTime: number;
  logger: { debug(message: string, extra?: object): void; warn(message: string, extra?: object): void };
  recoverFromFetch(error: KafkaError): Promise<void>;
  heartbeat(options: { interval: number }): Promise<void>;
  commitOffsets(offsets?: unknown): Promise<void>;
  joinAndSync(): Promise<void>;
  /** When the metadata was last refreshed because of an unreachable broker (ms). */
  failoverRefreshAt?: number;
  /** The coordinator lookup in progress, shared by every caller. */
  coordinatorLookup?: Promise<void>;
}

/** The broker could not be reached or did not answer: another broker may lead now. */
export function isUnreachable(error: KafkaError | undefined): boolean {
  for (let e = error, depth = 0; e && depth < 4; e = e.originalError, depth++) {
    if (
      e.name === 'KafkaJSConnectionError' ||
      e.name === 'KafkaJSConnectionClosedError' ||
      e.name === 'KafkaJSRequestTimeoutError' ||
      e.name === 'KafkaJSBrokerNotFound'
    )
      return true;
    if (e.code === 'ECONNREFUSED' || e.code === 'ECONNRESET' || e.code === 'ETIMEDOUT' || e.code === 'EPIPE')
      return true;
  }
  return false;
}

/** The partition's leadership moved: a metadata refresh is enough, the assignment still holds. */
const LEADER_MOVED = new Set([
  'LEADER_NOT_AVAILABLE',
  'NOT_LEADER_FOR_PARTITION',
  'FENCED_LEADER_EPOCH',
  'UNKNOWN_LEADER_EPOCH',
]);

/** The coordinator moved or is loading the group elsewhere: look it up again, keep the membership. */
const COORDINATOR_MOVED = new Set([
  'NOT_COORDINATOR_FOR_GROUP',
  'GROUP_COORDINATOR_NOT_AVAILABLE',
  'GROUP_LOAD_IN_PROGRESS',
]);

export function coordinatorLost(error: KafkaError | undefined): boolean {
  return (
    isUnreachable(error) ||
    (error?.type !== undefined && COORDINATOR_MOVED.has(error.type)) ||
    error?.name === 'KafkaJSGroupCoordinatorNotFound'
  );
}

const REFRESH_EVERY_MS = 1000;

/** `<groupId>\0<memberId>` → what the member does before it rejoins (see `beforeRejoin`). */
const rejoinHooks = new Map<string, () => Promise<void>>();

/**
 * Runs `hook` before the member `memberId` of `groupId` rejoins its group (a rebalance it was
 * told of, still in its generation), not after it was evicted; returns the unregistration.
 */
export function beforeRejoin(groupId: string, memberId: string, hook: () => Promise<void>): () => void {
  const key = `${groupId}\u0000${memberId}`;
  rejoinHooks.set(key, hook);
  return () => {
    if (rejoinHooks.get(key) === hook) rejoinHooks.delete(key);
  };
}
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function refreshThrottled(group: ConsumerGroupInstance): Promise<void> {
  const now = Date.now();
  if (group.failoverRefreshAt !== undefined && now - group.failoverRefreshAt < REFRESH_EVERY_MS) return;
  group.failoverRefreshAt = now;
  await group.cluster.refreshMetadata().catch(() => undefined);
}

/** Finds the group's coordinator again; the offset manager commits there too. One lookup at a time. */
function lookUpCoordinator(group: ConsumerGroupInstance): Promise<void> {
  group.coordinatorLookup ??= (async () => {
    try {
      await group.cluster.refreshMetadata().catch(() => undefined);
      const coordinator = await group.cluster.findGroupCoordinator({ groupId: group.groupId });
      group.coordinator = coordinator;
      if (group.offsetManager) group.offsetManager.coordinator = coordinator;
    } finally {
      group.coordinatorLookup = undefined;
    }
  })();
  return group.coordinatorLookup;
}

const requireFromHere = createRequire(import.meta.url);
const ConsumerGroup = requireFromHere('kafkajs/src/consumer/consumerGroup.js') as {
  prototype: ConsumerGroupInstance & { failoverFixed?: boolean };
};

if (!ConsumerGroup.prototype.failoverFixed) {
  ConsumerGroup.prototype.failoverFixed = true;
  const recoverFromFetch = ConsumerGroup.prototype.recoverFromFetch;
  ConsumerGroup.prototype.recoverFromFetch = async function (
    this: ConsumerGroupInstance,
    error: KafkaError,
  ): Promise<void> {
    if (isUnreachable(error)) {
      this.logger.debug('Fetch from an unreachable broker: refreshing metadata, other brokers keep being fetched', {
        groupId: this.groupId,
        error: error.message,
      });
      await refreshThrottled(this);
      // A refused connection fails at once: without a pause this fetcher would spin.
      await sleep(Math.min(this.maxWaitTime, REFRESH_EVERY_MS));
      return;
    }
    if (error.type !== undefined && LEADER_MOVED.has(error.type)) {
      this.logger.debug('A partition leader moved: refreshing metadata (no rejoin)', {
        groupId: this.groupId,
        error: error.message,
      });
      await refreshThrottled(this);
      return;
    }
    return recoverFromFetch.call(this, error);
  };

  const heartbeat = ConsumerGroup.prototype.heartbeat;
  ConsumerGroup.prototype.heartbeat = async function (
    this: ConsumerGroupInstance,
    options: { interval: number },
  ): Promise<void> {
    try {
      await heartbeat.call(this, options);
    } catch (error) {
      if (!coordinatorLost(error as KafkaError)) throw error;
      // The membership stands until the (new) coordinator says otherwise: look it up and try there.
      this.logger.debug('Group coordinator lost: looking it up again', {
        groupId: this.groupId,
        error: errorMessage(error),
      });
      await lookUpCoordinator(this).catch(() => undefined);
      await heartbeat.call(this, { interval: 0 }).catch((again: unknown) => {
        if (!coordinatorLost(again as KafkaError)) throw again;
      });
    }
  };

  const joinAndSync = ConsumerGroup.prototype.joinAndSync;
  ConsumerGroup.prototype.joinAndSync = async function (this: ConsumerGroupInstance): Promise<void> {
    const hook = this.memberId ? rejoinHooks.get(`${this.groupId}\u0000${this.memberId}`) : undefined;
    if (hook)
      await hook().catch((error: unknown) =>
        this.logger.warn('Before rejoining: the member hook failed', {
          groupId: this.groupId,
          error: errorMessage(error),
        }),
      );
    return joinAndSync.call(this);
  };

  const commitOffsets = ConsumerGroup.prototype.commitOffsets;
  ConsumerGroup.prototype.commitOffsets = async function (
    this: ConsumerGroupInstance,
    offsets?: unknown,
  ): Promise<void> {
    try {
      await commitOffsets.call(this, offsets);
    } catch (error) {
      // The commit fails (the caller commits again later), and the next one goes to the new coordinator.
      if (coordinatorLost(error as KafkaError)) void lookUpCoordinator(this).catch(() => undefined);
      throw error;
    }
  };
}

/**
 * A dead broker's connections are disconnected on every attempt to reach it again (kafkajs's broker
 * pool disconnects the whole broker after a failed connect), and kafkajs 2.2.4 unrefs the socket
 * each time. A socket already destroyed (refused, reset) has no handle, so Node defers each unref
 * to a `connect` event that never comes: listeners pile up on it and, at the eleventh, Node prints
 * a MaxListenersExceededWarning to stderr (every sender and tracker did, at a broker's kill -9, in
 * campaign 5b26969c). A destroyed socket needs neither end nor unref: it is dropped first.
 */
const KafkajsConnection = requireFromHere('kafkajs/src/network/connection.js') as {
  prototype: { disconnect(): Promise<void>; socket: Socket | null; deadSocketFixed?: boolean };
};

if (!KafkajsConnection.prototype.deadSocketFixed) {
  KafkajsConnection.prototype.deadSocketFixed = true;
  const disconnect = KafkajsConnection.prototype.disconnect;
  KafkajsConnection.prototype.disconnect = function (this: { socket: Socket | null }): Promise<void> {
    if (this.socket?.destroyed) this.socket = null;
    return disconnect.call(this);
  };
}
