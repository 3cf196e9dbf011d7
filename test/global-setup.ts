import { existsSync } from 'node:fs';
import type { TestProject } from 'vitest/node';
import { startLocalBroker } from '../src/local-kafka/local-broker.js';

declare module 'vitest' {
  export interface ProvidedContext {
    kafkaBrokers: string;
    kafkaSource: 'env' | 'container' | 'local';
  }
}

/**
 * One Kafka for the whole run: KAFKA_BROKERS when set, else a testcontainers broker when a
 * container runtime answers, else the embedded local broker (jars from Maven Central).
 * MSGBRIDGE_TEST_KAFKA=local|container forces a choice.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const forced = process.env.MSGBRIDGE_TEST_KAFKA;
  if (process.env.KAFKA_BROKERS && !forced) {
    project.provide('kafkaBrokers', process.env.KAFKA_BROKERS);
    project.provide('kafkaSource', 'env');
    return async () => {};
  }
  if (forced === 'container' || (forced !== 'local' && (await containerRuntimeAnswers()))) {
    const { KafkaContainer } = await import('@testcontainers/kafka');
    const container = await new KafkaContainer('confluentinc/cp-kafka:7.9.1').withKraft().start();
    project.provide('kafkaBrokers', `${container.getHost()}:${container.getMappedPort(9093)}`);
    project.provide('kafkaSource', 'container');
    return async () => {
      await container.stop();
    };
  }
  const started = Date.now();
  const broker = await startLocalBroker({ heapMb: 768, partitions: 3 });
  console.log(`[global-setup] local Kafka ${broker.bootstrap} ready in ${Date.now() - started} ms`);
  project.provide('kafkaBrokers', broker.bootstrap);
  project.provide('kafkaSource', 'local');
  return () => broker.stop();
}

async function containerRuntimeAnswers(): Promise<boolean> {
  const socket =
    process.env.DOCKER_HOST ?? (existsSync('/var/run/docker.sock') ? 'unix:///var/run/docker.sock' : undefined);
  if (!socket) return false;
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await Promise.race([
      getContainerRuntimeClient(),
      new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), 5000)),
    ]);
    return true;
  } catch {
    return false;
  }
}
