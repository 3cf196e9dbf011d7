import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { buildProgram, main } from '../../src/cli.js';
import { runCli } from '../helpers/cli.js';

function allCommands(command: Command, path: string[] = []): string[][] {
  return command.commands.flatMap((c) => [[...path, c.name()], ...allCommands(c, [...path, c.name()])]);
}

describe('msgbridge CLI usage', () => {
  afterEach(() => vi.restoreAllMocks());

  const quiet = () => {
    vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
  };

  it('has --help on every command and subcommand (exit 0)', async () => {
    const commands = allCommands(buildProgram()).filter((p) => p[p.length - 1] !== 'help');
    expect(commands.map((c) => c.join(' '))).toEqual(
      expect.arrayContaining([
        'dev',
        'ingress',
        'sender',
        'tracker',
        'status',
        'simulator',
        'kafka',
        'send',
        'send text',
        'send template',
        'tail',
        'webhooks',
        'webhooks register',
        'webhooks list',
        'webhooks delete',
      ]),
    );
    quiet();
    for (const path of commands) expect(await main(['node', 'msgbridge', ...path, '--help']), path.join(' ')).toBe(0);
  });

  it.each([
    [['nonsense']],
    [['send']],
    [['send', 'text', '--text', 'hi']],
    [['send', 'text', '--to', '+15550002222']],
    [['send', 'text', '--to', '+15550002222', '--text', 'hi', '--timeout', 'soon']],
    [['send', 'template', '--to', '+15550002222', '--template', 't', '--param', 'novalue']],
    [['send', 'text', '--to', '+15550002222', '--text', 'hi', '--param', 'name=Ada']],
    [['send', 'text', '--to', '+15550002222', '--text', 'hi', '--fallback-template', 'welcome', '--param', 'novalue']],
    [['send', 'text', '--to', '+15550002222', '--text', 'hi', '--fallback-template', '']],
    [['send', 'text', '--to', '+15550002222', '--text', 'hi', '--channel', 'fax']],
    [['send', 'text', '--to', '+15550002222', '--text', 'hi', '--channel', 'sms', '--fallback-template', 'welcome']],
    [['tail']],
    [['tail', 'messages', '--max', '0']],
    [['webhooks', 'register', '--topics', 'messages,bogus']],
    [['webhooks', 'register', '--address-base', 'ftp://x']],
    [['kafka', '--heap-mb', '12']],
    [['kafka', '--secure', 'plaintext']],
    [['kafka', '--nodes', '9']],
    [['dev', '--summary-interval', '-1']],
    [['ingress', '--unknown-flag']],
    [['--config', '', 'ingress']],
    [['--config', ' ', 'sender']],
    [['--config', '', 'tail', 'messages']],
    [['--config', '/nonexistent/msgbridge.json', 'ingress']],
    [['--config', '/nonexistent/msgbridge.json', 'webhooks', 'list']],
  ])('rejects %j with exit code 2', async (args) => {
    quiet();
    expect(await main(['node', 'msgbridge', ...args])).toBe(2);
  });

  it('names the channels --channel takes, in the first line (the usage follows, as for every bad option)', async () => {
    const result = await runCli(['send', 'text', '--to', '+15550002222', '--text', 'hi', '--channel', 'fax'], {
      KAFKA_BROKERS: '127.0.0.1:1',
    });
    expect(result.code).toBe(2);
    expect(result.stderr.split('\n')[0]).toBe(
      `error: option '--channel <channel>' argument 'fax' is invalid. expected whatsapp or sms, got "fax"`,
    );
  });

  it('dev --fresh refuses, in one line naming the holder, while another live process keeps the Kafka data', async () => {
    const kept = mkdtempSync(join(tmpdir(), 'msgbridge-kept-busy-'));
    writeFileSync(join(kept, 'owner.pid'), `${process.pid}\n`);
    writeFileSync(join(kept, 'data'), 'kept');
    const result = await runCli(['dev', '--fresh'], {
      KAFKA_BROKERS: '',
      MSGBRIDGE__localKafka__devDataDir: JSON.stringify(kept),
    });
    expect(result.code).toBe(1);
    expect(result.stderr.trim()).toBe(
      `msgbridge: the Kafka data kept in ${kept} is in use by process ${process.pid} (another msgbridge dev?)`,
    );
    expect(readFileSync(join(kept, 'data'), 'utf8')).toBe('kept');
  });

  it('prints a clear message for a bad argument, from a real process', async () => {
    const result = await runCli(['send', 'text', '--to', 'not-a-number', '--text', 'hi'], {
      KAFKA_BROKERS: '127.0.0.1:1',
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(
      /invalid send request: recipient\.id: expected a phone number in international format/,
    );
  });

  it('send text: --param without --fallback-template, and an empty fallback template name, are refused clearly before any Kafka', async () => {
    const param = await runCli(['send', 'text', '--to', '+15550002222', '--text', 'hi', '--param', 'name=Ada'], {
      KAFKA_BROKERS: '127.0.0.1:1',
    });
    expect(param.code).toBe(2);
    expect(param.stderr).toMatch(
      /--param sets a parameter of the fallback template: it needs --fallback-template <name>/,
    );
    const empty = await runCli(['send', 'text', '--to', '+15550002222', '--text', 'hi', '--fallback-template', ''], {
      KAFKA_BROKERS: '127.0.0.1:1',
    });
    expect(empty.code).toBe(2);
    expect(empty.stderr).toMatch(
      /invalid send request: fallbackTemplate\.templateName: expected the name of an approved template/,
    );
  });

  it('an empty or unreadable --config is refused the same way by every command, naming what is wrong', async () => {
    for (const command of [['ingress'], ['sender'], ['send', 'text', '--to', '+15550002222', '--text', 'hi']]) {
      const empty = await runCli(['--config', '', ...command], {});
      expect(empty.code, command.join(' ')).toBe(2);
      expect(empty.stderr).toMatch(
        /option '-c, --config <file>' argument '' is invalid\. expected the path of a JSON configuration file, got an empty value/,
      );
    }
    const missing = await runCli(['--config', '/nonexistent/msgbridge.json', 'sender'], {});
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/cannot read configuration file \/nonexistent\/msgbridge\.json/);
  });

  it('a bad configuration value names the field, exit code 2', async () => {
    const result = await runCli(['tail', 'messages'], { KAFKA_BROKERS: 'nocolon' });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/kafka\.brokers\.0: expected host:port \(from KAFKA_BROKERS\)/);
  });

  it('tracker: a state directory it cannot write is refused at start, naming the setting', async () => {
    // Under a regular file: no directory can be made there.
    const file = join(mkdtempSync(join(tmpdir(), 'msgbridge-state-')), 'a-file');
    writeFileSync(file, '');
    const result = await runCli(['tracker'], {
      KAFKA_BROKERS: '127.0.0.1:1',
      MSGBRIDGE_TRACKER_STATE_DIR: `${file}/tracker`,
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(
      `tracker.stateDir ${file}/tracker: the tracker cannot write its stores there (ENOTDIR); set MSGBRIDGE_TRACKER_STATE_DIR`,
    );
  });

  it('operator commands without any Kafka say how to get one', async () => {
    const result = await runCli(['tail', 'messages'], {
      MSGBRIDGE__localKafka__cacheDir: '"/tmp/msgbridge-no-dev-here"',
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/set KAFKA_BROKERS .* or start `msgbridge dev` first/);
  });

  it('commands that talk to Kafka fail in one line naming the cause, exit code 2, with either kind of command', async () => {
    for (const args of [
      ['tail', 'messages'],
      ['send', 'text', '--to', '+15550001111', '--text', 'hi'],
    ]) {
      const { code, stderr } = await runCli(args, {
        KAFKA_BROKERS: '127.0.0.1:1',
        MSGBRIDGE_BUSINESS_ID: 'biz_1',
        MSGBRIDGE_API_KEY: 'k',
      });
      expect(code).toBe(2);
      expect(stderr.trim().split('\n')).toHaveLength(1);
      expect(stderr).toMatch(
        /^msgbridge: cannot use Kafka: unreachable: no broker answered \(.*ECONNREFUSED 127\.0\.0\.1:1/,
      );
      expect(stderr).not.toMatch(/\n\s+at /);
    }
  });

  it('webhooks commands name the missing business configuration, and an unreachable provider', async () => {
    const none = await runCli(['webhooks', 'list'], {});
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/no business configured/);
    const unreachable = await runCli(['webhooks', 'list'], {
      MSGBRIDGE_BUSINESS_ID: 'b',
      MSGBRIDGE_API_KEY: 'k',
      MSGBRIDGE_PROVIDER_URL: 'http://127.0.0.1:9',
    });
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toMatch(/cannot reach the provider at http:\/\/127\.0\.0\.1:9/);
    expect(unreachable.stderr).not.toContain('k\n');
  });
});

describe('msgbridge webhooks against the simulator', () => {
  it('registers both topics, is idempotent, lists, deletes, and names a rejected API key', async () => {
    const { startSimulator } = await import('../../src/simulator/index.js');
    const sim = await startSimulator({
      port: 0,
      businesses: [{ id: 'acme', apiKey: 'right-key', signingSecret: 's' }],
    });
    try {
      const env = { MSGBRIDGE_BUSINESS_ID: 'acme', MSGBRIDGE_API_KEY: 'right-key', MSGBRIDGE_PROVIDER_URL: sim.url };
      const base = ['--address-base', 'http://ingress.example:8080'];
      const first = await runCli(['webhooks', 'register', ...base], env);
      expect(first.code, first.stderr).toBe(0);
      expect(first.stdout).toContain('acme messages: registered → http://ingress.example:8080/webhooks/acme/messages');
      expect(first.stdout).toContain(
        'acme delivery_status: registered → http://ingress.example:8080/webhooks/acme/delivery_status',
      );
      expect(
        sim
          .webhooks('acme')
          .map((r) => r.topic)
          .sort(),
      ).toEqual(['delivery_status', 'messages']);

      const second = await runCli(['webhooks', 'register', ...base], env);
      expect(second.stdout.match(/already registered/g)).toHaveLength(2);
      expect(sim.webhooks('acme')).toHaveLength(2);

      const deleted = await runCli(['webhooks', 'delete', ...base, '--topics', 'messages'], env);
      expect(deleted.code, deleted.stderr).toBe(0);
      expect(sim.webhooks('acme').map((r) => r.topic)).toEqual(['delivery_status']);

      const wrongKey = await runCli(['webhooks', 'register', ...base], { ...env, MSGBRIDGE_API_KEY: 'wrong-key' });
      expect(wrongKey.code).not.toBe(0);
      expect(`${wrongKey.stdout}${wrongKey.stderr}`).toMatch(/the provider rejected the API key \(HTTP 401\)/);
      expect(`${wrongKey.stdout}${wrongKey.stderr}`).not.toContain('wrong-key');
    } finally {
      await sim.close();
    }
  });
});
