import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli.js';
import { loadConfig } from '../../src/config/load.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { simulatorOptionsFromConfig, type RunningSimulator } from '../../src/simulator/index.js';
import { BIZ, call, register, startReceiver, withSimulator, type Receiver } from './helpers.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

describe('simulator options from the configuration', () => {
  it('takes the business from the env shorthand; the first secret of a rotation signs', () => {
    const config = loadConfig({
      env: {
        MSGBRIDGE_BUSINESS_ID: 'biz_env',
        MSGBRIDGE_SIGNING_SECRET: 'new-secret,old-secret',
        MSGBRIDGE_API_KEY: 'env-key',
        MSGBRIDGE_SIMULATOR_PORT: '9123',
      },
    });
    const options = simulatorOptionsFromConfig(config);
    expect(options.businesses).toEqual([{ id: 'biz_env', apiKey: 'env-key', signingSecret: 'new-secret' }]);
    expect(options.port).toBe(9123);
  });

  it('names what is missing', () => {
    expect(() => simulatorOptionsFromConfig(loadConfig({ env: {} }))).toThrow(
      /businesses: the simulator needs at least one business/,
    );
    const noKey = loadConfig({ env: { MSGBRIDGE_BUSINESS_ID: 'b', MSGBRIDGE_SIGNING_SECRET: 's' } });
    const error = (() => {
      try {
        simulatorOptionsFromConfig(noKey);
      } catch (err) {
        return err;
      }
    })();
    expect(isMsgbridgeError(error, 'CONFIG_INVALID')).toBe(true);
    expect((error as Error).message).toContain('businesses.0.apiKey');
  });
});

describe('msgbridge simulator inbound / faults', () => {
  let sim: RunningSimulator;
  let receiver: Receiver;
  let out: string[];
  beforeAll(async () => {
    receiver = await startReceiver();
    sim = await withSimulator();
    await register(sim, 'messages', `${receiver.url}/hook`);
  });
  afterAll(async () => {
    await sim.close();
    await receiver.close();
  });
  afterEach(() => vi.restoreAllMocks());

  const run = async (...args: string[]) => {
    out = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      out.push(String(chunk));
      return true;
    });
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      out.push(String(chunk));
      return true;
    });
    return main(['node', 'msgbridge', 'simulator', ...args]);
  };

  it('injects an inbound message that reaches the registered address', async () => {
    const code = await run(
      'inbound',
      '--business',
      BIZ.id,
      '--from',
      '+15550009999',
      '--text',
      'from the CLI',
      '--url',
      sim.url,
    );
    expect(code).toBe(0);
    const answer = JSON.parse(out.join('')) as { eventId: string; deliveries: number };
    expect(answer.deliveries).toBe(1);
    const [request] = await receiver.waitFor(1);
    expect(JSON.parse(request!.body.toString('utf8'))).toMatchObject({
      sender: { id: '+15550009999' },
      message: { text: 'from the CLI' },
    });
  });

  it('injects a button reply with --button <payload>', async () => {
    receiver.requests.length = 0;
    const code = await run(
      'inbound',
      '--business',
      BIZ.id,
      '--from',
      '15550009998',
      '--text',
      'Yes',
      '--button',
      'confirm-42',
      '--url',
      sim.url,
    );
    expect(code).toBe(0);
    const [request] = await receiver.waitFor(1);
    expect(JSON.parse(request!.body.toString('utf8'))).toMatchObject({
      sender: { id: '15550009998' },
      message: { text: 'Yes' },
      isButtonResponse: true,
      callbackData: 'confirm-42',
    });
    receiver.requests.length = 0;
    expect(
      await run('inbound', '--business', BIZ.id, '--from', '15550009998', '--text', 'No', '--button', '--url', sim.url),
    ).toBe(0);
    const [plain] = await receiver.waitFor(1);
    expect(JSON.parse(plain!.body.toString('utf8'))).not.toHaveProperty('callbackData');
  });

  it('sets, shows and resets faults', async () => {
    expect(await run('faults', '--set', '{"send5xxRate":0.5}', '--url', sim.url)).toBe(0);
    expect(sim.getFaults().send5xxRate).toBe(0.5);
    expect(await run('faults', '--url', sim.url)).toBe(0);
    expect(JSON.parse(out.join(''))).toMatchObject({ send5xxRate: 0.5 });
    expect(await run('faults', '--reset', '--url', sim.url)).toBe(0);
    expect(sim.getFaults().send5xxRate).toBe(0);
  });

  it('exits 2 on bad arguments or a refused request, 1 when no simulator answers', async () => {
    expect(await run('inbound', '--business', BIZ.id, '--from', 'abc', '--text', 'x', '--url', sim.url)).toBe(2);
    expect(await run('inbound', '--business', 'nope', '--from', '+15550009999', '--text', 'x', '--url', sim.url)).toBe(
      2,
    );
    expect(out.join('')).toContain('unknown business "nope"');
    expect(await run('faults', '--set', '{"send429Rate":9}', '--url', sim.url)).toBe(2);
    expect(await run('faults', '--set', 'not json', '--url', sim.url)).toBe(2);
    expect(
      await run(
        'inbound',
        '--business',
        BIZ.id,
        '--from',
        '+15550009999',
        '--text',
        'x',
        '--url',
        'http://127.0.0.1:9',
      ),
    ).toBe(1);
  });
});

describe('msgbridge simulator (process)', () => {
  it('starts from environment variables alone, serves the API, never logs secrets, and stops cleanly on SIGTERM', async () => {
    const port = await freePort();
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'simulator'], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        MSGBRIDGE_BUSINESS_ID: 'biz_proc',
        MSGBRIDGE_SIGNING_SECRET: 'proc-signing-secret',
        MSGBRIDGE_API_KEY: 'proc-api-key',
        MSGBRIDGE_SIMULATOR_PORT: String(port),
        MSGBRIDGE_LOG_LEVEL: 'debug',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 30_000;
      while (!output.includes('provider simulator at')) {
        if (Date.now() > deadline || child.exitCode !== null)
          throw new Error(`the simulator did not start:\n${output}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const url = `http://127.0.0.1:${port}`;
      const headers = { 'content-type': 'application/json', 'x-api-key': 'proc-api-key' };
      expect(
        (await call(`${url}/sim/businesses/biz_proc/inbound`, { body: { from: '+15550002222', text: 'hi' } })).status,
      ).toBe(200);
      const sent = await call(`${url}/v1/businesses/biz_proc/send/messages`, {
        headers,
        body: { recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hi' } },
      });
      expect(sent.status).toBe(200);
      expect(
        (
          await call(`${url}/v1/businesses/biz_proc/send/messages`, {
            headers: { ...headers, 'x-api-key': 'wrong' },
            body: {},
          })
        ).status,
      ).toBe(401);
      await call(`${url}/v1/businesses/biz_proc/create/webhooks`, {
        headers,
        body: { topic: 'messages', address: 'http://127.0.0.1:9/x' },
      });
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
    expect(output).toContain('"msg":"stopped"');
    expect(output).not.toContain('proc-signing-secret');
    expect(output).not.toContain('proc-api-key');
  });
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
