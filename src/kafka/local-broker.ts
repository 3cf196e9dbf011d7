import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MsgbridgeError } from '../errors.js';

/**
 * A single-node Apache Kafka (KRaft: broker and controller in one JVM) on free loopback
 * ports, from jars that Maven resolves from Maven Central and that are cached between runs.
 */
export const KAFKA_POM = fileURLToPath(new URL('../../config/kafka-pom.xml', import.meta.url));

export interface LocalBrokerOptions {
  /** Where the jars are cached; default ~/.cache/msgbridge (or $MSGBRIDGE_CACHE_DIR). */
  cacheDir?: string | null;
  /** JVM heap in MiB (the machines are small: keep it bounded). */
  heapMb?: number;
  /** Default partition count of auto-created topics. */
  partitions?: number;
  startTimeoutMs?: number;
  /** Called with progress lines ("resolving jars", "formatting storage"...). */
  onProgress?: (line: string) => void;
}

export interface LocalBroker {
  readonly bootstrap: string;
  readonly port: number;
  readonly dataDir: string;
  readonly pid: number;
  readonly startupMs: number;
  stop(): Promise<void>;
}

export function kafkaVersion(): string {
  const pom = readFileSync(KAFKA_POM, 'utf8');
  const match = /<kafka\.version>([^<]+)<\/kafka\.version>/.exec(pom);
  if (!match?.[1]) throw new MsgbridgeError('KAFKA_JARS_UNAVAILABLE', `no <kafka.version> in ${KAFKA_POM}`);
  return match[1];
}

export function defaultCacheDir(): string {
  return process.env.MSGBRIDGE_CACHE_DIR || join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'msgbridge');
}

function commandWorks(command: string, args: string[]): boolean {
  const result = spawnSync(command, args, { stdio: 'ignore', timeout: 30_000 });
  return result.error === undefined && result.status === 0;
}

export function requireJava(): void {
  if (!commandWorks('java', ['-version'])) {
    throw new MsgbridgeError(
      'JAVA_MISSING',
      'the embedded Kafka broker needs Java 17 or newer on the PATH: install a JDK or JRE (for example `apt-get install openjdk-17-jre-headless`), or set KAFKA_BROKERS to use an existing cluster',
    );
  }
}

/**
 * The directory holding every jar of the broker, resolving it through Maven on first use.
 * The copy lands in a temporary directory and is renamed into place, so an interrupted
 * download never leaves a half-filled cache behind.
 */
export function ensureKafkaJars(options: Pick<LocalBrokerOptions, 'cacheDir' | 'onProgress'> = {}): string {
  const version = kafkaVersion();
  const root = options.cacheDir ?? defaultCacheDir();
  const libs = join(root, `kafka-${version}`, 'libs');
  if (existsSync(join(libs, '.complete'))) return libs;

  if (!commandWorks('mvn', ['-v'])) {
    throw new MsgbridgeError(
      'MAVEN_MISSING',
      `the embedded Kafka broker's jars are resolved from Maven Central with Maven, which is not on the PATH: install Maven (for example \`apt-get install maven\`), or set KAFKA_BROKERS to use an existing cluster`,
    );
  }
  options.onProgress?.(`resolving Apache Kafka ${version} jars from Maven Central into ${libs}`);
  mkdirSync(join(root, `kafka-${version}`), { recursive: true });
  const staging = mkdtempSync(join(root, `kafka-${version}`, 'libs.partial-'));
  const result = spawnSync(
    'mvn',
    ['-q', '-B', '-f', KAFKA_POM, 'dependency:copy-dependencies', `-DoutputDirectory=${staging}`, '-DincludeScope=runtime'],
    { encoding: 'utf8', timeout: 15 * 60_000, maxBuffer: 16 * 1024 * 1024 },
  );
  if (result.status !== 0 || !readdirSync(staging).some((f) => f.startsWith('kafka_2.13-'))) {
    rmSync(staging, { recursive: true, force: true });
    const output = `${result.stdout ?? ''}${result.stderr ?? ''}`.trim().split('\n').slice(-15).join('\n');
    throw new MsgbridgeError('KAFKA_JARS_UNAVAILABLE', `Maven could not resolve the Kafka ${version} jars:\n${output || result.error?.message}`);
  }
  writeFileSync(join(staging, '.complete'), `${new Date().toISOString()}\n`);
  rmSync(libs, { recursive: true, force: true });
  renameSync(staging, libs);
  return libs;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** A Kafka cluster id: 16 random bytes, base64url without padding. */
function clusterId(): string {
  return randomBytes(16).toString('base64url');
}

function serverProperties(dir: string, brokerPort: number, controllerPort: number, partitions: number): string {
  return [
    'process.roles=broker,controller',
    'node.id=1',
    `controller.quorum.voters=1@127.0.0.1:${controllerPort}`,
    `listeners=PLAINTEXT://127.0.0.1:${brokerPort},CONTROLLER://127.0.0.1:${controllerPort}`,
    `advertised.listeners=PLAINTEXT://127.0.0.1:${brokerPort}`,
    'controller.listener.names=CONTROLLER',
    'inter.broker.listener.name=PLAINTEXT',
    'listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT',
    `log.dirs=${join(dir, 'data')}`,
    `num.partitions=${partitions}`,
    'auto.create.topics.enable=true',
    'offsets.topic.replication.factor=1',
    'offsets.topic.num.partitions=10',
    'transaction.state.log.replication.factor=1',
    'transaction.state.log.min.isr=1',
    'group.initial.rebalance.delay.ms=0',
    'num.network.threads=2',
    'num.io.threads=4',
    'log.flush.interval.messages=9223372036854775807',
    'delete.topic.enable=true',
    '',
  ].join('\n');
}

const LOG4J = [
  'log4j.rootLogger=WARN, stdout',
  'log4j.appender.stdout=org.apache.log4j.ConsoleAppender',
  'log4j.appender.stdout.layout=org.apache.log4j.PatternLayout',
  'log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n',
  'log4j.logger.kafka.server.KafkaServer=INFO',
  'log4j.logger.kafka.server.BrokerServer=INFO',
  '',
].join('\n');

function tail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8').trim().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

function tcpAnswers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = new Socket();
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.once('error', () => done(false));
    socket.connect(port, '127.0.0.1', () => done(true));
  });
}

/**
 * Formats fresh KRaft storage and starts the broker. Resolves once the broker has logged
 * that it started and its port answers. The JVM is tied to this process: on Linux it gets
 * SIGTERM when its parent dies (even by SIGKILL); on a normal exit `stop()` runs.
 */
export async function startLocalBroker(options: LocalBrokerOptions = {}): Promise<LocalBroker> {
  const started = Date.now();
  requireJava();
  const libs = ensureKafkaJars(options);
  const classpath = `${libs}/*`;
  const dir = mkdtempSync(join(tmpdir(), 'msgbridge-kafka-'));
  const [brokerPort, controllerPort] = [await freePort(), await freePort()];
  const propsFile = join(dir, 'server.properties');
  writeFileSync(propsFile, serverProperties(dir, brokerPort, controllerPort, options.partitions ?? 6));
  writeFileSync(join(dir, 'log4j.properties'), LOG4J);
  const logFile = join(dir, 'kafka.log');
  const heap = options.heapMb ?? 512;
  const jvmArgs = [
    `-Xms${Math.min(256, heap)}m`,
    `-Xmx${heap}m`,
    '-XX:+UseG1GC',
    '-XX:MaxGCPauseMillis=20',
    '-Djava.awt.headless=true',
    `-Dlog4j.configuration=file:${join(dir, 'log4j.properties')}`,
    `-Dkafka.logs.dir=${dir}`,
    '-cp',
    classpath,
  ];

  options.onProgress?.('formatting KRaft storage');
  const format = spawnSync('java', [...jvmArgs.filter((a) => !a.startsWith('-Xms')), 'kafka.tools.StorageTool', 'format', `--cluster-id=${clusterId()}`, '--config', propsFile], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  if (format.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    throw new MsgbridgeError('LOCAL_BROKER_FAILED', `formatting Kafka storage failed:\n${`${format.stdout}${format.stderr}`.trim()}`);
  }

  options.onProgress?.(`starting Kafka on 127.0.0.1:${brokerPort}`);
  const pdeathsig = process.platform === 'linux' && commandWorks('setpriv', ['--help']);
  const [command, args] = pdeathsig
    ? ['setpriv', ['--pdeathsig', 'TERM', '--', 'java', ...jvmArgs, 'kafka.Kafka', propsFile]]
    : ['java', [...jvmArgs, 'kafka.Kafka', propsFile]];
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, CLASSPATH: '' } });
  const log = createWriteStream(logFile);
  child.stdout!.pipe(log);
  child.stderr!.pipe(log);

  let exited = false;
  const exitedPromise = new Promise<void>((resolve) => child.once('exit', () => ((exited = true), resolve())));
  const killOnExit = () => {
    if (!exited) child.kill('SIGKILL');
  };
  process.once('exit', killOnExit);

  const stop = async () => {
    process.removeListener('exit', killOnExit);
    if (!exited) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exitedPromise;
      clearTimeout(timer);
    }
    log.end();
    rmSync(dir, { recursive: true, force: true });
  };

  const deadline = Date.now() + (options.startTimeoutMs ?? 90_000);
  for (;;) {
    if (exited) {
      const output = tail(logFile);
      rmSync(dir, { recursive: true, force: true });
      throw new MsgbridgeError('LOCAL_BROKER_FAILED', `the Kafka broker exited during start-up:\n${output}`);
    }
    if (Date.now() > deadline) {
      const output = tail(logFile);
      await stop();
      throw new MsgbridgeError('LOCAL_BROKER_FAILED', `the Kafka broker did not start within ${options.startTimeoutMs ?? 90_000} ms:\n${output}`);
    }
    if (/Transition from STARTING to STARTED \(kafka\.server\.BrokerServer\)|Kafka Server started/.test(tail(logFile, 200)) && (await tcpAnswers(brokerPort))) break;
    await new Promise((r) => setTimeout(r, 150));
  }

  return {
    bootstrap: `127.0.0.1:${brokerPort}`,
    port: brokerPort,
    dataDir: dir,
    pid: child.pid!,
    startupMs: Date.now() - started,
    stop,
  };
}

