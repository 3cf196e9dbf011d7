import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const script = join(import.meta.dirname, '..', '..', 'scripts', 'prerequisites.mjs');
// A PATH with node and nothing else: every tool is missing but the browsers, which are files.
const bare = mkdtempSync(join(tmpdir(), 'prereq-path-'));
symlinkSync(process.execPath, join(bare, 'node'));
afterAll(() => rmSync(bare, { recursive: true, force: true }));

/** The check as npm's pretest runs it; MSGBRIDGE_PREREQUISITES=check never installs (this machine's root would). */
function check(purpose: string, env: Record<string, string>) {
  const started = process.hrtime.bigint();
  const result = spawnSync(process.execPath, [script, purpose], {
    env: { HOME: process.env.HOME!, MSGBRIDGE_PREREQUISITES: 'check', ...env },
    encoding: 'utf8',
    timeout: 10_000,
  });
  return { ...result, ms: Number(process.hrtime.bigint() - started) / 1e6 };
}

describe('the prerequisite check of npm start and npm test', () => {
  it('with a PATH lacking the tools: stops at once with one line naming the command, exit 1', () => {
    const result = check('test', {
      PATH: bare,
      CHROMIUM_PATH: '/usr/bin/chromium',
      FIREFOX_PATH: '/usr/bin/firefox-esr',
    });
    expect(result.status).toBe(1);
    expect(result.stdout).toBe('');
    const lines = result.stderr.trimEnd().split('\n');
    expect(lines).toHaveLength(1);
    // apt-get is not on that PATH either: the line names the Debian packages.
    expect(lines[0]).toMatch(
      /^msgbridge: `npm test` needs Java 17\+, openssl, promtool, tinyproxy, not found: install them \(on Debian: apt-get install default-jre-headless openssl prometheus tinyproxy\)$/,
    );
    // At once: nothing installed, nothing fetched (an apt-get takes minutes). About 0.1 s on a
    // quiet machine; 1.3 s was seen at load 20 on 2 cores, hence the loose bound.
    expect(result.ms).toBeLessThan(5000);
  });

  it('with apt-get on the PATH but not root (or told only to check): the exact apt-get command', () => {
    const withApt = mkdtempSync(join(tmpdir(), 'prereq-apt-'));
    try {
      symlinkSync(process.execPath, join(withApt, 'node'));
      symlinkSync('/usr/bin/apt-get', join(withApt, 'apt-get'));
      for (const tool of ['java', 'openssl', 'tinyproxy'])
        symlinkSync(spawnSync('which', [tool], { encoding: 'utf8' }).stdout.trim(), join(withApt, tool));
      const result = check('test', {
        PATH: withApt,
        CHROMIUM_PATH: '/usr/bin/chromium',
        FIREFOX_PATH: '/usr/bin/firefox-esr',
      });
      expect(result.status).toBe(1);
      expect(result.stderr).toMatch(
        /^msgbridge: `npm test` needs promtool, not found: run {2}sudo apt-get update && sudo apt-get install -y prometheus && sudo systemctl disable --now prometheus prometheus-node-exporter\n$/,
      );
    } finally {
      rmSync(withApt, { recursive: true, force: true });
    }
  });

  it('a browser named by its variable that is not there: stops, naming it', () => {
    const result = check('test', { PATH: process.env.PATH!, FIREFOX_PATH: join(bare, 'firefox') });
    expect(result.status).toBe(1);
    expect(result.stderr).toContain(`FIREFOX_PATH=${join(bare, 'firefox')} does not exist`);
  });

  it('start with KAFKA_BROKERS needs nothing; the whole test set is here on this machine: exit 0, silent', () => {
    expect(check('start', { PATH: bare, KAFKA_BROKERS: '127.0.0.1:9' })).toMatchObject({
      status: 0,
      stdout: '',
      stderr: '',
    });
    expect(check('test', { PATH: process.env.PATH! })).toMatchObject({ status: 0, stdout: '', stderr: '' });
  });

  it('a wrong argument: exit 2 with one line', () => {
    const result = check('deploy', { PATH: bare });
    expect(result.status).toBe(2);
    expect(result.stderr).toBe('prerequisites: expected start or test, got deploy\n');
  });
});
