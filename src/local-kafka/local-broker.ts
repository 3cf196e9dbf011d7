import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  createWriteStream,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { Socket } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pollingAdmin } from '../kafka/admin.js';
import { MsgbridgeError } from '../platform/errors.js';
import { probePort } from '../platform/net.js';

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
  /**
   * A client listener that needs TLS, with a throw-away CA generated at start: `scram` is
   * SASL_SSL with SCRAM-SHA-512 (one user), `mtls` is SSL with client certificates required.
   */
  secure?: 'scram' | 'mtls';
  /**
   * Keep the broker's data here between runs (one plaintext node): formatted on first use, started
   * from what it holds afterwards, on its last run's ports when they are free. One process at a
   * time: while a live process holds it, the start fails with LOCAL_BROKER_BUSY.
   */
  keepDir?: string;
  /**
   * How long the broker holds a new consumer group's first join (Kafka's default is 3000); default
   * 0, so that tests and the dev mode do not wait. A benchmark sets Kafka's default to measure what
   * a production broker does.
   */
  groupInitialRebalanceDelayMs?: number;
}

/** What a client of a secure local broker needs: files and the environment variables naming them. */
export interface SecureClientSettings {
  caFile: string;
  /** mtls: the client's certificate and key, signed by the CA. */
  certFile?: string;
  keyFile?: string;
  /** scram: the user the broker knows. */
  username?: string;
  password?: string;
  /** KAFKA_SSL, KAFKA_SSL_CA_FILE... exactly as a role reads them. */
  env: Record<string, string>;
}

export interface LocalBroker {
  readonly bootstrap: string;
  /** Set for a secure broker: how to connect. */
  readonly client?: SecureClientSettings;
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

/** Checks that Java runs; answers its `-version` text (names the JDK build). */
export function requireJava(): string {
  const result = spawnSync('java', ['-version'], { encoding: 'utf8', timeout: 30_000 });
  if (result.error !== undefined || result.status !== 0) {
    throw new MsgbridgeError(
      'JAVA_MISSING',
      'the embedded Kafka broker needs Java 17 or newer on the PATH: install a JDK or JRE (for example `apt-get install openjdk-17-jre-headless`), or set KAFKA_BROKERS to use an existing cluster',
    );
  }
  return `${result.stderr}${result.stdout}`;
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
    [
      '-q',
      '-B',
      '-f',
      KAFKA_POM,
      'dependency:copy-dependencies',
      `-DoutputDirectory=${staging}`,
      '-DincludeScope=runtime',
    ],
    {
      encoding: 'utf8',
      timeout: 15 * 60_000,
      maxBuffer: 16 * 1024 * 1024,
    },
  );
  if (result.status !== 0 || !readdirSync(staging).some((f) => f.startsWith('kafka_2.13-'))) {
    rmSync(staging, { recursive: true, force: true });
    const output = `${result.stdout ?? ''}${result.stderr ?? ''}`.trim().split('\n').slice(-15).join('\n');
    throw new MsgbridgeError(
      'KAFKA_JARS_UNAVAILABLE',
      `Maven could not resolve the Kafka ${version} jars:\n${output || result.error?.message}`,
    );
  }
  writeFileSync(join(staging, '.complete'), `${new Date().toISOString()}\n`);
  rmSync(libs, { recursive: true, force: true });
  renameSync(staging, libs);
  return libs;
}

const freePort = () => probePort('127.0.0.1');

/** A Kafka cluster id: 16 random bytes, base64url without padding. */
function clusterId(): string {
  return randomBytes(16).toString('base64url');
}

interface ServerTls {
  caPem: string;
  certPem: string;
  keyPem: string;
}

interface Ports {
  client: number;
  controller: number;
  /** A plaintext listener for the broker's own traffic, when the client one is secured. */
  internal: number | undefined;
}

function serverProperties(
  dir: string,
  ports: Ports,
  partitions: number,
  secure: LocalBrokerOptions['secure'],
  tls: ServerTls | undefined,
  quorum: { nodeId: number; voters: string; nodes: number },
  groupInitialRebalanceDelayMs: number,
): string {
  const client = secure === 'scram' ? 'SASL_SSL' : secure === 'mtls' ? 'SSL' : 'PLAINTEXT';
  // PEM stores inline: newlines of a PEM value are escaped for the properties file.
  const inline = (pem: string) => pem.trim().split('\n').join('\\n');
  const security =
    secure && tls
      ? [
          'ssl.keystore.type=PEM',
          `ssl.keystore.certificate.chain=${inline(tls.certPem)}`,
          `ssl.keystore.key=${inline(tls.keyPem)}`,
          'ssl.truststore.type=PEM',
          `ssl.truststore.certificates=${inline(tls.caPem)}`,
          'ssl.endpoint.identification.algorithm=',
          ...(secure === 'mtls' ? ['ssl.client.auth=required'] : []),
          ...(secure === 'scram'
            ? [
                'sasl.enabled.mechanisms=SCRAM-SHA-512',
                'listener.name.client.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;',
              ]
            : []),
        ]
      : [];
  return [
    'process.roles=broker,controller',
    `node.id=${quorum.nodeId}`,
    `controller.quorum.voters=${quorum.voters}`,
    // The client listener (plaintext or secured) and, when secured, a plaintext one for the broker itself.
    `listeners=CLIENT://127.0.0.1:${ports.client},CONTROLLER://127.0.0.1:${ports.controller}${ports.internal ? `,INTERNAL://127.0.0.1:${ports.internal}` : ''}`,
    `advertised.listeners=CLIENT://127.0.0.1:${ports.client}${ports.internal ? `,INTERNAL://127.0.0.1:${ports.internal}` : ''}`,
    'controller.listener.names=CONTROLLER',
    `inter.broker.listener.name=${ports.internal ? 'INTERNAL' : 'CLIENT'}`,
    `listener.security.protocol.map=CONTROLLER:PLAINTEXT,CLIENT:${client}${ports.internal ? ',INTERNAL:PLAINTEXT' : ''}`,
    ...security,
    `log.dirs=${join(dir, 'data')}`,
    `num.partitions=${partitions}`,
    'auto.create.topics.enable=true',
    `offsets.topic.replication.factor=${Math.min(3, quorum.nodes)}`,
    'offsets.topic.num.partitions=10',
    `transaction.state.log.replication.factor=${Math.min(3, quorum.nodes)}`,
    `transaction.state.log.min.isr=${Math.min(2, quorum.nodes)}`,
    `group.initial.rebalance.delay.ms=${groupInitialRebalanceDelayMs}`,
    'num.network.threads=2',
    'num.io.threads=4',
    'log.flush.interval.messages=9223372036854775807',
    'delete.topic.enable=true',
    '',
  ].join('\n');
}

/**
 * A throw-away CA and a server certificate for 127.0.0.1 (and, for mutual TLS, a client
 * certificate), made with openssl into `dir`. The PEM texts go into the broker's properties.
 */
function generateTls(
  dir: string,
  withClient: boolean,
): { server: ServerTls; caFile: string; clientCertFile?: string; clientKeyFile?: string } {
  mkdirSync(dir, { recursive: true });
  const run = (args: string[]) => {
    const result = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    if (result.status !== 0)
      throw new MsgbridgeError(
        'LOCAL_BROKER_FAILED',
        `openssl ${args[0]} failed (a secure local broker needs openssl): ${`${result.stderr ?? ''}${result.error?.message ?? ''}`.trim()}`,
      );
  };
  run([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '2',
    '-subj',
    '/CN=msgbridge local test CA',
    '-keyout',
    'ca.key',
    '-out',
    'ca.crt',
  ]);
  const issue = (name: string, subject: string, extension: string) => {
    writeFileSync(join(dir, `${name}.ext`), extension);
    run(['req', '-newkey', 'rsa:2048', '-nodes', '-subj', subject, '-keyout', `${name}.key`, '-out', `${name}.csr`]);
    run([
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-days',
      '2',
      '-extfile',
      `${name}.ext`,
      '-out',
      `${name}.crt`,
    ]);
  };
  issue('server', '/CN=127.0.0.1', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  if (withClient) issue('client', '/CN=msgbridge', 'extendedKeyUsage=clientAuth\n');
  const read = (name: string) => readFileSync(join(dir, name), 'utf8');
  // Kafka's PEM key store wants PKCS#8, which openssl req writes by default.
  return {
    server: { caPem: read('ca.crt'), certPem: read('server.crt'), keyPem: read('server.key') },
    caFile: join(dir, 'ca.crt'),
    ...(withClient ? { clientCertFile: join(dir, 'client.crt'), clientKeyFile: join(dir, 'client.key') } : {}),
  };
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

/** The log line of a node that serves. */
const STARTED = /Transition from STARTING to STARTED \(kafka\.server\.BrokerServer\)|Kafka Server started/;

/** One node of a local cluster. */
export interface LocalNode {
  readonly id: number;
  readonly port: number;
  readonly pid: number;
  /** Whether its JVM is still running. */
  readonly alive: boolean;
  /** Stops it (SIGTERM, then SIGKILL); its data stays until the cluster stops. */
  stop(): Promise<void>;
  /** Starts it again after it stopped or was killed (same id, same data); resolves once it serves. */
  start(): Promise<void>;
}

export interface LocalCluster {
  /** Every node's client listener, comma-separated. */
  readonly bootstrap: string;
  /** Where the nodes keep their data and logs (removed by stop()). */
  readonly dataDir: string;
  readonly nodes: readonly LocalNode[];
  readonly client?: SecureClientSettings;
  readonly startupMs: number;
  stop(): Promise<void>;
}

/**
 * Formats fresh KRaft storage (or reuses `keepDir`'s) and starts the broker. Resolves once the broker has logged
 * that it started and its port answers. The JVM is tied to this process: on Linux it gets
 * SIGTERM when its parent dies (even by SIGKILL); on a normal exit `stop()` runs.
 */
export async function startLocalBroker(options: LocalBrokerOptions = {}): Promise<LocalBroker> {
  const cluster = await startLocalCluster({ ...options, nodes: 1 });
  const node = cluster.nodes[0]!;
  return {
    bootstrap: cluster.bootstrap,
    ...(cluster.client ? { client: cluster.client } : {}),
    port: node.port,
    dataDir: cluster.dataDir,
    pid: node.pid,
    startupMs: cluster.startupMs,
    stop: () => cluster.stop(),
  };
}

/**
 * `nodes` combined broker+controller nodes forming one KRaft quorum (3 for failover tests:
 * internal topics replicated 3 times, min ISR 2), each its own JVM with a bounded heap, all
 * formatted with the same cluster id. Topics the relay creates get the relay's own settings;
 * the brokers keep Kafka's defaults (min.insync.replicas=1), as a real cluster would.
 */
export async function startLocalCluster(options: LocalBrokerOptions & { nodes: number }): Promise<LocalCluster> {
  const started = Date.now();
  if (!(options.nodes >= 1 && options.nodes <= 5))
    throw new MsgbridgeError('INVALID_ARGUMENT', 'a local cluster has 1 to 5 nodes');
  const java = requireJava();
  const libs = ensureKafkaJars(options);
  const sharedClasses = classArchive(libs, java);
  const kept = options.keepDir;
  if (kept !== undefined && (options.nodes !== 1 || options.secure))
    throw new MsgbridgeError('INVALID_ARGUMENT', 'only a single plaintext node keeps its data between runs');
  const dir = kept ?? mkdtempSync(join(tmpdir(), 'msgbridge-kafka-'));
  // What stops or a failed start leaves: a kept directory unlocked, a throw-away one removed.
  const releaseDir = kept !== undefined ? lockKeptDir(kept) : () => rmSync(dir, { recursive: true, force: true });
  const count = options.nodes;
  const ports: Ports[] = kept !== undefined ? [await keptPorts(kept)] : [];
  for (let i = ports.length; i < count; i++)
    ports.push({
      client: await freePort(),
      controller: await freePort(),
      internal: options.secure ? await freePort() : undefined,
    });
  const voters = ports.map((p, i) => `${i + 1}@127.0.0.1:${p.controller}`).join(',');
  const tls = options.secure ? generateTls(join(dir, 'tls'), options.secure === 'mtls') : undefined;
  const scram =
    options.secure === 'scram' ? { username: 'msgbridge', password: randomBytes(12).toString('base64url') } : undefined;
  writeFileSync(join(dir, 'log4j.properties'), LOG4J);
  const id = clusterId();
  const heap = options.heapMb ?? 512;
  const jvmArgs = (nodeDir: string, classes: string[] = []) => [
    `-Xms${Math.min(256, heap)}m`,
    `-Xmx${heap}m`,
    '-XX:+UseG1GC',
    '-XX:MaxGCPauseMillis=20',
    '-Djava.awt.headless=true',
    `-Dlog4j.configuration=file:${join(dir, 'log4j.properties')}`,
    `-Dkafka.logs.dir=${nodeDir}`,
    ...classes,
    '-cp',
    join(libs, '*'),
  ];

  const nodeDirs = ports.map((_, i) => join(dir, `node-${i + 1}`));
  // A kept directory is formatted once: its metadata log then names its cluster.
  const formatted = kept !== undefined && existsSync(join(nodeDirs[0]!, 'data', 'meta.properties'));
  options.onProgress?.(formatted ? `reusing the Kafka data kept in ${dir}` : 'formatting KRaft storage');
  for (let i = 0; i < count; i++) {
    mkdirSync(nodeDirs[i]!, { recursive: true });
    // Only this run's lines: start-up is detected in this file.
    rmSync(join(nodeDirs[i]!, 'kafka.log'), { force: true });
    const propsFile = join(nodeDirs[i]!, 'server.properties');
    writeFileSync(
      propsFile,
      serverProperties(
        nodeDirs[i]!,
        ports[i]!,
        options.partitions ?? 6,
        options.secure,
        tls?.server,
        {
          nodeId: i + 1,
          voters,
          nodes: count,
        },
        options.groupInitialRebalanceDelayMs ?? 0,
      ),
    );
    if (formatted) continue;
    try {
      formatStorage(
        jvmArgs(nodeDirs[i]!).filter((a) => !a.startsWith('-Xms')),
        [`--cluster-id=${id}`, '--config', propsFile],
        scram,
      );
    } catch (err) {
      releaseDir();
      throw err;
    }
  }

  options.onProgress?.(`starting Kafka on ${ports.map((p) => `127.0.0.1:${p.client}`).join(', ')}`);
  const pdeathsig = process.platform === 'linux' && commandWorks('setpriv', ['--help']);
  const nodes = nodeDirs.map((nodeDir, i) => {
    const classes = sharedClasses();
    return launchNode(i + 1, ports[i]!.client, nodeDir, jvmArgs(nodeDir, classes.args), pdeathsig, classes.settle);
  });
  const stop = async () => {
    await Promise.all(nodes.map((n) => n.stop()));
    releaseDir();
  };

  const deadline = Date.now() + (options.startTimeoutMs ?? 90_000);
  for (const node of nodes) {
    for (;;) {
      if (!node.alive) {
        const output = tail(node.logFile);
        await stop();
        throw new MsgbridgeError('LOCAL_BROKER_FAILED', `the Kafka broker exited during start-up:\n${output}`);
      }
      if (Date.now() > deadline) {
        const output = tail(node.logFile);
        await stop();
        throw new MsgbridgeError(
          'LOCAL_BROKER_FAILED',
          `the Kafka broker did not start within ${options.startTimeoutMs ?? 90_000} ms:\n${output}`,
        );
      }
      if (STARTED.test(tail(node.logFile, 200)) && (await tcpAnswers(node.port))) break;
      await new Promise((r) => setTimeout(r, 150));
    }
  }

  if (count > 1) {
    // Every node registered and unfenced before anyone creates a topic of replication factor N.
    try {
      await waitForBrokers(
        ports.map((p) => `127.0.0.1:${p.internal ?? p.client}`),
        count,
        deadline,
      );
    } catch (err) {
      await stop();
      throw err;
    }
  }
  const bootstrap = ports.map((p) => `127.0.0.1:${p.client}`).join(',');
  let client: SecureClientSettings | undefined;
  if (tls) {
    const env: Record<string, string> = { KAFKA_BROKERS: bootstrap, KAFKA_SSL: 'true', KAFKA_SSL_CA_FILE: tls.caFile };
    if (tls.clientCertFile && tls.clientKeyFile)
      Object.assign(env, { KAFKA_SSL_CERT_FILE: tls.clientCertFile, KAFKA_SSL_KEY_FILE: tls.clientKeyFile });
    if (scram)
      Object.assign(env, {
        KAFKA_SASL_MECHANISM: 'scram-sha-512',
        KAFKA_SASL_USERNAME: scram.username,
        KAFKA_SASL_PASSWORD: scram.password,
      });
    client = {
      caFile: tls.caFile,
      certFile: tls.clientCertFile,
      keyFile: tls.clientKeyFile,
      username: scram?.username,
      password: scram?.password,
      env,
    };
  }
  return { bootstrap, dataDir: dir, nodes, ...(client ? { client } : {}), startupMs: Date.now() - started, stop };
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes a kept directory for this process (`owner.pid`), or fails naming the live process that
 * holds it; a holder that died (kill -9) leaves a lock that the next start takes over.
 * Returns the release.
 */
function lockKeptDir(dir: string): () => void {
  mkdirSync(dir, { recursive: true });
  const lock = join(dir, 'owner.pid');
  for (let attempt = 0; ; attempt++) {
    try {
      writeFileSync(lock, `${process.pid}\n`, { flag: 'wx' });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw err;
      const holder = Number.parseInt(readFileSync(lock, 'utf8'), 10);
      if (Number.isInteger(holder) && holder > 0 && processAlive(holder))
        throw new MsgbridgeError(
          'LOCAL_BROKER_BUSY',
          `the Kafka data kept in ${dir} is in use by process ${holder} (another msgbridge dev?)`,
        );
      rmSync(lock, { force: true });
    }
  }
  let held = true;
  return () => {
    if (held) rmSync(lock, { force: true });
    held = false;
  };
}

/**
 * Empties a kept directory (`msgbridge dev --fresh`); refused while a live process holds it.
 */
export function removeKeptDir(dir: string): void {
  if (!existsSync(dir)) return;
  lockKeptDir(dir);
  rmSync(dir, { recursive: true, force: true });
}

const portFree = (port: number) =>
  probePort('127.0.0.1', port).then(
    () => true,
    () => false,
  );

/** A kept node's ports of its last run when they are all free, otherwise new ones; written back for the next run. */
async function keptPorts(dir: string): Promise<Ports> {
  const file = join(dir, 'ports.json');
  let ports: Ports | undefined;
  try {
    const last = JSON.parse(readFileSync(file, 'utf8')) as { client?: unknown; controller?: unknown };
    if (
      typeof last.client === 'number' &&
      typeof last.controller === 'number' &&
      (await portFree(last.client)) &&
      (await portFree(last.controller))
    )
      ports = { client: last.client, controller: last.controller, internal: undefined };
  } catch {
    // first run, or an unreadable file: new ports
  }
  ports ??= { client: await freePort(), controller: await freePort(), internal: undefined };
  writeFileSync(file, `${JSON.stringify({ client: ports.client, controller: ports.controller })}\n`);
  return ports;
}

/**
 * Class data sharing for the broker's JVM: it maps the classes an earlier start loaded from an
 * archive instead of loading and verifying them again (a kept dev broker: 5.7 s to started
 * without, 3.7 s with). The archive is one per JDK build (a JVM ignores another build's). While
 * there is none, each JVM writes one at its exit under a name of its own, renamed into place by
 * `settle`, so brokers starting together never read a half-written one.
 */
function classArchive(libs: string, javaVersion: string): () => { args: string[]; settle(): void } {
  const dir = join(libs, '..');
  const file = join(dir, `classes-${createHash('sha256').update(javaVersion).digest('hex').slice(0, 16)}.jsa`);
  // Archives written by a process that died before renaming them (best effort: another may be removing them too).
  try {
    for (const name of readdirSync(dir))
      if (name.endsWith('.partial') && Date.now() - statSync(join(dir, name)).mtimeMs > 600_000)
        rmSync(join(dir, name), { force: true });
  } catch {
    // left for a later start
  }
  return () => {
    if (existsSync(file)) return { args: [`-XX:SharedArchiveFile=${file}`], settle: () => undefined };
    const partial = `${file}.${process.pid}-${randomBytes(4).toString('hex')}.partial`;
    return {
      args: [`-XX:ArchiveClassesAtExit=${partial}`],
      // Called when this JVM exited: its archive is complete.
      settle() {
        try {
          if (existsSync(partial) && !existsSync(file)) renameSync(partial, file);
        } catch {
          // another process renamed its archive first
        }
        rmSync(partial, { force: true });
      },
    };
  };
}

/** Formats one node's KRaft storage; SCRAM credentials are written into the metadata log then. */
function formatStorage(jvmArgs: string[], args: string[], scram: { username: string; password: string } | undefined) {
  const addScram = scram ? ['--add-scram', `SCRAM-SHA-512=[name=${scram.username},password=${scram.password}]`] : [];
  const format = spawnSync('java', [...jvmArgs, 'kafka.tools.StorageTool', 'format', ...args, ...addScram], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  if (format.status !== 0)
    throw new MsgbridgeError(
      'LOCAL_BROKER_FAILED',
      `formatting Kafka storage failed:\n${`${format.stdout}${format.stderr}`.trim()}`,
    );
}

/** Until the cluster's metadata lists `count` brokers (asked over the plaintext listeners). */
async function waitForBrokers(bootstrap: string[], count: number, deadline: number): Promise<void> {
  const admin = pollingAdmin(bootstrap, 'msgbridge-local-cluster');
  try {
    for (;;) {
      try {
        if ((await admin.brokerCount()) >= count) return;
      } catch {
        // not yet
      }
      if (Date.now() > deadline)
        throw new MsgbridgeError(
          'LOCAL_BROKER_FAILED',
          `the ${count} Kafka nodes did not all register within the start timeout`,
        );
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await admin.close().catch(() => undefined);
  }
}

/** Starts one node's JVM (again after it stopped: same id, same data); it is killed when this process exits. */
function launchNode(
  id: number,
  port: number,
  nodeDir: string,
  jvmArgs: string[],
  pdeathsig: boolean,
  onExit: () => void,
): LocalNode & { logFile: string } {
  const propsFile = join(nodeDir, 'server.properties');
  const logFile = join(nodeDir, 'kafka.log');
  const [command, args] = pdeathsig
    ? ['setpriv', ['--pdeathsig', 'TERM', '--', 'java', ...jvmArgs, 'kafka.Kafka', propsFile]]
    : ['java', [...jvmArgs, 'kafka.Kafka', propsFile]];
  let child: ReturnType<typeof spawn>;
  let exited = true;
  let exitedPromise: Promise<void> = Promise.resolve();
  const killOnExit = () => {
    if (!exited) child.kill('SIGKILL');
  };
  const spawnJvm = () => {
    // Its own process group: Ctrl-C in a terminal signals the whole foreground group, and the
    // broker must outlive the roles' drain (whoever started it stops it last).
    child = spawn(command, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, CLASSPATH: '' },
      detached: true,
    });
    const log = createWriteStream(logFile, { flags: 'a' });
    child.stdout!.pipe(log);
    child.stderr!.pipe(log);
    exited = false;
    exitedPromise = new Promise<void>((resolve) =>
      child.once('exit', () => {
        exited = true;
        log.end();
        onExit();
        resolve();
      }),
    );
    process.once('exit', killOnExit);
  };
  spawnJvm();
  return {
    id,
    port,
    logFile,
    get pid() {
      return child.pid!;
    },
    get alive() {
      return !exited;
    },
    async start() {
      if (!exited) return;
      // Only what this run writes counts: the file still holds the previous run's lines.
      const offset = existsSync(logFile) ? readFileSync(logFile).length : 0;
      spawnJvm();
      const deadline = Date.now() + 90_000;
      const startedNow = () => STARTED.test(readFileSync(logFile).subarray(offset).toString());
      while (!(startedNow() && (await tcpAnswers(port)))) {
        if (exited || Date.now() > deadline)
          throw new MsgbridgeError('LOCAL_BROKER_FAILED', `node ${id} did not start again:\n${tail(logFile)}`);
        await new Promise((r) => setTimeout(r, 150));
      }
    },
    async stop() {
      process.removeListener('exit', killOnExit);
      if (!exited) {
        // A frozen JVM (SIGSTOP in a test) must be able to die.
        child.kill('SIGCONT');
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
        await exitedPromise;
        clearTimeout(timer);
      }
    },
  };
}
