// Resolves the embedded broker's jars into the cache (idempotent): `npm run kafka:jars`.
import { du } from './du.js';
import { ensureKafkaJars, requireJava } from '../src/local-kafka/local-broker.js';

requireJava();
const started = Date.now();
const libs = ensureKafkaJars({ onProgress: (line) => console.log(line) });
console.log(`Kafka jars ready in ${libs} (${du(libs)}, ${Date.now() - started} ms)`);
