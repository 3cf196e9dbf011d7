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
  /**
   * A client listener that needs TLS, with a throw-away CA generated at start: `scram` is
   * SASL_SSL with SCRAM-SHA-512 (one user), `mtls` is SSL with client certificates required.
   */
  secure?: 'scram' | 'mtls';
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

function serverProperties(dir: string, ports: Ports, partitions: number, secure?: LocalBrokerOptions['secure'], tls?: ServerTls): string {
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
    'node.id=1',
    `controller.quorum.voters=1@127.0.0.1:${ports.controller}`,
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

/**
 * A throw-away CA and a server certificate for 127.0.0.1 (and, for mutual TLS, a client
 * certificate), made with openssl into `dir`. The PEM texts go into the broker's properties.
 */
function generateTls(dir: string, withClient: boolean): { server: ServerTls; caFile: string; clientCertFile?: string; clientKeyFile?: string } {
  mkdirSync(dir, { recursive: true });
  const run = (args: string[]) => {
    const result = spawnSync('openssl', args, { cwd: dir, encoding: 'utf8', timeout: 60_000 });
    if (result.status !== 0) throw new MsgbridgeError('LOCAL_BROKER_FAILED', `openssl ${args[0]} failed (a secure local broker needs openssl): ${`${result.stderr ?? ''}${result.error?.message ?? ''}`.trim()}`);
  };
  run(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-subj', '/CN=msgbridge local test CA', '-keyout', 'ca.key', '-out', 'ca.crt']);
  const issue = (name: string, subject: string, extension: string) => {
    writeFileSync(join(dir, `${name}.ext`), extension);
    run(['req', '-newkey', 'rsa:2048', '-nodes', '-subj', subject, '-keyout', `${name}.key`, '-out', `${name}.csr`]);
    run(['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2', '-extfile', `${name}.ext`, '-out', `${name}.crt`]);
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
  const internalPort = options.secure ? await freePort() : undefined;
  const tls = options.secure ? generateTls(join(dir, 'tls'), options.secure === 'mtls') : undefined;
  const propsFile = join(dir, 'server.properties');
  writeFileSync(propsFile, serverProperties(dir, { client: brokerPort, controller: controllerPort, internal: internalPort }, options.partitions ?? 6, options.secure, tls?.server));
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
  const scram = options.secure === 'scram' ? { username: 'msgbridge', password: randomBytes(12).toString('base64url') } : undefined;
  // SCRAM credentials are written into the metadata log at format time (KRaft).
  const addScram = scram ? ['--add-scram', `SCRAM-SHA-512=[name=${scram.username},password=${scram.password}]`] : [];
  const format = spawnSync('java', [...jvmArgs.filter((a) => !a.startsWith('-Xms')), 'kafka.tools.StorageTool', 'format', `--cluster-id=${clusterId()}`, '--config', propsFile, ...addScram], {
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

  let client: SecureClientSettings | undefined;
  if (tls) {
    const env: Record<string, string> = { KAFKA_BROKERS: `127.0.0.1:${brokerPort}`, KAFKA_SSL: 'true', KAFKA_SSL_CA_FILE: tls.caFile };
    if (tls.clientCertFile && tls.clientKeyFile) Object.assign(env, { KAFKA_SSL_CERT_FILE: tls.clientCertFile, KAFKA_SSL_KEY_FILE: tls.clientKeyFile });
    if (scram) Object.assign(env, { KAFKA_SASL_MECHANISM: 'scram-sha-512', KAFKA_SASL_USERNAME: scram.username, KAFKA_SASL_PASSWORD: scram.password });
    client = { caFile: tls.caFile, certFile: tls.clientCertFile, keyFile: tls.clientKeyFile, username: scram?.username, password: scram?.password, env };
  }

  return {
    bootstrap: `127.0.0.1:${brokerPort}`,
    ...(client ? { client } : {}),
    port: brokerPort,
    dataDir: dir,
    pid: child.pid!,
    startupMs: Date.now() - started,
    stop,
  };
}

