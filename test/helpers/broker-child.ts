// Starts a local broker, prints its JVM pid, then waits to be killed (see local-broker.int.test.ts).
import { startLocalBroker } from '../../src/local-kafka/local-broker.js';

const broker = await startLocalBroker({ heapMb: 256 });
process.stdout.write(`${JSON.stringify({ pid: broker.pid, bootstrap: broker.bootstrap })}\n`);
setInterval(() => {}, 60_000);
