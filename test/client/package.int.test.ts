import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * The package as a producer's service gets it: `npm pack` of this repository (built first), the
 * tarball installed into a fresh project (`npm init -y`; the dependencies from the npm cache or
 * registry), then an ESM script and a strict TypeScript check against its exports. The script
 * also lists what importing `msgbridge/client` loaded: ES modules through a resolve hook, native
 * libraries from the process report, CommonJS from require's cache.
 */
const root = join(import.meta.dirname, '..', '..');
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
let work: string;
let project: string;

function run(command: string, args: string[], cwd: string, timeoutMs = 240_000): string {
  const result = spawnSync(command, args, {
    cwd,
    encoding: 'utf8',
    timeout: timeoutMs,
    env: { ...process.env, npm_config_fund: 'false', npm_config_audit: 'false', npm_config_update_notifier: 'false' },
  });
  if (result.status !== 0)
    throw new Error(
      `${command} ${args.join(' ')} failed (${result.status ?? result.signal}):\n${result.stdout}\n${result.stderr}`,
    );
  return result.stdout;
}

/** Newest modification time of the files under `dir` that `keep` selects (ms). */
function newest(
  dir: string,
  keep: (name: string) => boolean,
  pick: (a: number, b: number) => number,
  start: number,
): number {
  let at = start;
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && keep(entry.name)) at = pick(at, statSync(join(entry.parentPath, entry.name)).mtimeMs);
  }
  return at;
}

beforeAll(() => {
  work = mkdtempSync(join(tmpdir(), 'msgbridge-pack-'));
  // The tarball must hold the code under test: built again unless dist/ is newer than every source file (CI builds just
  // before).
  const sources = newest(join(root, 'src'), () => true, Math.max, 0);
  const built = existsSync(join(root, 'dist', 'cli.js'))
    ? newest(join(root, 'dist'), (n) => n.endsWith('.js'), Math.min, Infinity)
    : 0;
  if (built < sources) run(npm, ['run', 'build'], root);
  run(npm, ['pack', '--pack-destination', work], root);
  const tarball = readdirSync(work).find((f) => f.endsWith('.tgz'));
  if (!tarball) throw new Error(`npm pack wrote no tarball in ${work}`);
  project = join(work, 'producer');
  execFileSync('mkdir', [project]);
  run(npm, ['init', '-y'], project);
  // From the local tarball; its dependencies (and the type checker) from npm's cache when there.
  run(
    npm,
    [
      'install',
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
      join(work, tarball),
      `typescript@${devVersion('typescript')}`,
      `@types/node@${devVersion('@types/node')}`,
    ],
    project,
  );
}, 600_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

function devVersion(name: string): string {
  const pkg = JSON.parse(
    execFileSync('node', ['-p', `JSON.stringify(require('./package.json').devDependencies)`], {
      cwd: root,
      encoding: 'utf8',
    }),
  ) as Record<string, string>;
  return pkg[name]!;
}

const HOOKS = `
let port;
export function initialize(data) { port = data.port; }
export async function resolve(specifier, context, next) {
  const answer = await next(specifier, context);
  port.postMessage(answer.url);
  return answer;
}
`;

const REGISTER = `
import { register } from 'node:module';
import { MessageChannel } from 'node:worker_threads';
const { port1, port2 } = new MessageChannel();
globalThis.resolved = [];
port1.on('message', (url) => globalThis.resolved.push(url));
port1.unref();
register('./hooks.mjs', import.meta.url, { data: { port: port2 }, transferList: [port2] });
`;

/** Imports `entry`, runs `body`, then prints what was loaded (as JSON on the last line). */
const script = (entry: string, body: string) => `
import { createRequire } from 'node:module';
const m = await import('${entry}');
const out = {};
${body}
await new Promise((r) => setTimeout(r, 200));
const cjs = Object.keys(createRequire(import.meta.url).cache);
const natives = process.report.getReport().sharedObjects.filter((s) => s.endsWith('.node'));
out.loaded = [...globalThis.resolved, ...cjs, ...natives];
console.log(JSON.stringify(out));
`;

function node(file: string, text: string): { out: Record<string, unknown>; loaded: string[] } {
  writeFileSync(join(project, 'hooks.mjs'), HOOKS);
  writeFileSync(join(project, 'register.mjs'), REGISTER);
  writeFileSync(join(project, file), text);
  const stdout = run(process.execPath, ['--import', './register.mjs', file], project, 60_000);
  const out = JSON.parse(stdout.trim().split('\n').at(-1)!) as Record<string, unknown> & { loaded: string[] };
  return { out, loaded: out.loaded };
}

const HEAVY =
  /node_modules\/(kafkajs|lmdb|@lmdb|uWebSockets\.js|@trufflesuite|@platformatic|pino|prom-client|@opentelemetry|undici)\//;
const packagesIn = (loaded: string[]) =>
  [
    ...new Set(
      loaded
        .map((u) => /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(u)?.[1])
        .filter((p): p is string => p !== undefined),
    ),
  ].sort();

describe('the packed package in a fresh project', () => {
  it('msgbridge/client: sendRequestRecord keys by the recipient and refuses an invalid recipient by name; nothing heavy loads', () => {
    const { out, loaded } = node(
      'client.mjs',
      script(
        'msgbridge/client',
        `
out.record = m.sendRequestRecord({ requestId: 'r1', type: 'text', recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hi' } });
try {
  m.sendRequestRecord({ requestId: 'r2', type: 'text', recipient: { channelType: 'whatsapp', id: 'nobody' }, message: { text: 'hi' } });
} catch (e) {
  out.error = { name: e.name, field: e.field, message: e.message, isClass: e instanceof m.SendRequestInvalidError };
}
out.exports = Object.keys(m).sort();
`,
      ),
    );
    expect(out.record).toEqual({
      topic: 'send-requests',
      key: '+15550002222',
      value:
        '{"requestId":"r1","type":"text","recipient":{"channelType":"whatsapp","id":"+15550002222"},"message":{"text":"hi"}}',
      headers: { 'content-type': 'application/json', schema: 'send-request/v1' },
    });
    expect(out.error).toEqual({
      name: 'SendRequestInvalidError',
      field: 'recipient.id',
      message:
        'invalid send request: recipient.id: expected a phone number in international format (+ and 5-20 digits)',
      isClass: true,
    });
    expect(out.exports).toEqual(
      expect.arrayContaining([
        'sendRequestRecord',
        'parseSendRequest',
        'waitForRequest',
        'SendRequestInvalidError',
        'ResultWaitError',
      ]),
    );
    // What did load: msgbridge's own files and zod, nothing else.
    expect(loaded.some((u) => u.includes('node_modules/msgbridge/dist/client/index.js'))).toBe(true);
    expect(packagesIn(loaded)).toEqual(['msgbridge', 'zod']);
    expect(loaded.filter((u) => HEAVY.test(u))).toEqual([]);
  });

  it('the same check sees kafkajs once msgbridge/client/kafka is imported (it is not blind), and msgbridge/contracts and the JSON Schemas import', () => {
    const kafka = node('kafka.mjs', script('msgbridge/client/kafka', `out.exports = Object.keys(m).sort();`));
    expect(kafka.out.exports).toEqual(
      expect.arrayContaining(['waitForResult', 'followSendResults', 'ResultWaitError']),
    );
    expect(packagesIn(kafka.loaded)).toContain('kafkajs');
    expect(kafka.loaded.filter((u) => /node_modules\/(lmdb|@trufflesuite|uWebSockets\.js)\//.test(u))).toEqual([]);

    const contracts = node(
      'contracts.mjs',
      script(
        'msgbridge/contracts',
        `
out.schemaId = m.SCHEMA_ID.sendRequest;
out.parsed = m.sendRequestSchema.safeParse({ requestId: 'r', type: 'template', number: '+15550003333', templateName: 't' }).success;
const { default: jsonSchema } = await import('msgbridge/schemas/send-request.schema.json', { with: { type: 'json' } });
out.jsonSchemaTitle = jsonSchema.title;
`,
      ),
    );
    expect(contracts.out).toMatchObject({
      schemaId: 'send-request/v1',
      parsed: true,
      jsonSchemaTitle: 'Send request (topic send-requests)',
    });
  });

  it('type-checks a producer against the exports (tsc strict), and refuses what the types forbid', () => {
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          types: ['node'],
        },
        files: ['producer.ts', 'mistakes.ts'],
      }),
    );
    const imports = `
import { sendRequestRecord, waitForRequest, SendRequestInvalidError, type SendRequest, type SendRequestRecord, type RequestAnswer } from 'msgbridge/client';
import { waitForResult, type SendResult } from 'msgbridge/client/kafka';
import { sendRequestSchema, SCHEMA_ID, type MessageState } from 'msgbridge/contracts';
`;
    const good = `${imports}
const request: SendRequest = { requestId: 'r1', type: 'template', number: '+15550003333', templateName: 'welcome', parameters: [] };
export const record: SendRequestRecord = sendRequestRecord(request, { topic: 'send-requests', headers: { traceparent: 'x' } });
const key: string = record.key;
const field: string = new SendRequestInvalidError('recipient.id', []).field;
export async function follow(): Promise<string> {
  const result: SendResult = await waitForResult(request.requestId, { brokers: ['kafka:9092'], since: Date.now(), timeoutMs: 1000 });
  const answer: RequestAnswer = await waitForRequest(request.requestId, { trackerUrl: 'http://tracker:8082', token: 't' });
  const state: MessageState | undefined = answer.kind === 'message' ? answer.message : undefined;
  return result.outcome === 'accepted' ? result.messageId : (state?.status ?? key + field + SCHEMA_ID.sendRequest + String(sendRequestSchema.safeParse(request).success));
}
`;
    // The types are real, not any: each of these lines is an error, and nothing else is.
    const wrong = [
      'export const n: number = sendRequestRecord({}).key;',
      "export const r: SendRequest = { requestId: 'r', type: 'sms', number: '+1' };",
      "void waitForResult('r', { since: 0 });",
    ];
    const mistakes = `${imports}\n${wrong.join('\n')}\n`;
    writeFileSync(join(project, 'producer.ts'), good);
    writeFileSync(join(project, 'mistakes.ts'), mistakes);
    const tsc = spawnSync(
      process.execPath,
      [join(project, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.json'],
      { cwd: project, encoding: 'utf8', timeout: 170_000 },
    );
    const errors = tsc.stdout.split('\n').filter((l) => l.includes('error TS'));
    const lines = mistakes.split('\n');
    expect(
      errors.filter((l) => !l.startsWith('mistakes.ts(')),
      tsc.stdout,
    ).toEqual([]);
    const failing = new Set(errors.flatMap((l) => /^mistakes\.ts\((\d+),/.exec(l)?.[1] ?? []));
    expect(
      [...failing].map((n) => lines[Number(n) - 1]),
      tsc.stdout,
    ).toEqual(wrong);
  }, 180_000);
});
