import { describe, expect, it } from 'vitest';
import {
  browserPath,
  distroOf,
  planPrerequisites,
  toolsFor,
  TOOLS,
  type Tool,
} from '../../scripts/prerequisites-plan.mjs';

const names = (tools: Tool[]) => tools.map((t) => t.name);
const facts = { purpose: 'test' as const, env: {}, isRoot: false, hasApt: true, distro: 'debian' as const };

describe('what npm start and npm test need from the system', () => {
  it('start: Java for the embedded Kafka, Maven until its jars are cached, nothing with KAFKA_BROKERS', () => {
    expect(names(toolsFor('start', { env: {}, jarsCached: false }))).toEqual(['java', 'mvn']);
    expect(names(toolsFor('start', { env: {}, jarsCached: true }))).toEqual(['java']);
    expect(names(toolsFor('start', { env: { KAFKA_BROKERS: 'k:9092' }, jarsCached: false }))).toEqual([]);
  });

  it('test: its own brokers even with KAFKA_BROKERS, openssl, promtool, both browsers and tinyproxy', () => {
    expect(names(toolsFor('test', { env: { KAFKA_BROKERS: 'k:9092' }, jarsCached: true }))).toEqual([
      'java',
      'openssl',
      'promtool',
      'chromium',
      'firefox-esr',
      'tinyproxy',
    ]);
    expect(names(toolsFor('test', { env: {}, jarsCached: false }))).toEqual([
      'java',
      'mvn',
      'openssl',
      'promtool',
      'chromium',
      'firefox-esr',
      'tinyproxy',
    ]);
  });

  it('nothing missing: nothing to do', () => {
    expect(planPrerequisites({ ...facts, missing: [] })).toEqual({ action: 'none' });
  });

  it('as root with apt: installs the Debian packages, and stops the service the prometheus package starts', () => {
    const plan = planPrerequisites({ ...facts, isRoot: true, missing: [TOOLS.java, TOOLS.promtool, TOOLS.firefox] });
    expect(plan).toEqual({
      action: 'install',
      apt: ['default-jre-headless', 'prometheus', 'firefox-esr'],
      snap: [],
      stopServices: ['prometheus', 'prometheus-node-exporter'],
      missing: ['java', 'promtool', 'firefox-esr'],
    });
  });

  it('not root: one line naming the exact command', () => {
    const plan = planPrerequisites({ ...facts, missing: [TOOLS.chromium, TOOLS.openssl] });
    expect(plan).toEqual({
      action: 'stop',
      line: 'msgbridge: `npm test` needs Chromium, openssl, not found: run  sudo apt-get update && sudo apt-get install -y chromium openssl',
    });
    const withPromtool = planPrerequisites({ ...facts, purpose: 'test', missing: [TOOLS.promtool] });
    expect(withPromtool).toMatchObject({
      line: expect.stringMatching(
        /apt-get install -y prometheus && sudo systemctl disable --now prometheus prometheus-node-exporter$/,
      ),
    });
    expect((withPromtool as { line: string }).line).not.toContain('\n');
  });

  it('Ubuntu: OpenJDK 17 by name, and the browsers as the snaps Ubuntu ships them as', () => {
    expect(
      planPrerequisites({
        ...facts,
        distro: 'ubuntu',
        isRoot: true,
        missing: [TOOLS.java, TOOLS.chromium, TOOLS.firefox],
      }),
    ).toMatchObject({
      action: 'install',
      apt: ['openjdk-17-jre-headless'],
      snap: ['chromium', 'firefox'],
    });
    expect(planPrerequisites({ ...facts, distro: 'ubuntu', missing: [TOOLS.mvn, TOOLS.firefox] })).toMatchObject({
      line: expect.stringMatching(
        /run {2}sudo apt-get update && sudo apt-get install -y maven && sudo snap install firefox$/,
      ),
    });
  });

  it('no apt (another system): stops even as root, naming what is missing and the Debian packages', () => {
    const plan = planPrerequisites({
      ...facts,
      isRoot: true,
      hasApt: false,
      distro: 'other',
      missing: [TOOLS.java, TOOLS.mvn],
    });
    expect(plan).toEqual({
      action: 'stop',
      line: 'msgbridge: `npm test` needs Java 17+, Maven, not found: install them (on Debian: apt-get install default-jre-headless maven)',
    });
  });

  it('a browser named by its variable that does not exist: stops even as root (installing another would not help)', () => {
    const plan = planPrerequisites({
      ...facts,
      isRoot: true,
      env: { FIREFOX_PATH: '/opt/ff/firefox' },
      missing: [TOOLS.openssl, TOOLS.firefox],
    });
    expect(plan).toEqual({
      action: 'stop',
      line: 'msgbridge: `npm test` needs openssl, Firefox ESR: FIREFOX_PATH=/opt/ff/firefox does not exist; unset it, or name the binary',
    });
  });

  it("a browser's binary: its variable's, else Debian's package's, else Ubuntu's snap's", () => {
    const exists = (present: string[]) => (path: string) => present.includes(path);
    expect(browserPath(TOOLS.chromium, { CHROMIUM_PATH: '/x/chrome' }, exists([]))).toBe('/x/chrome');
    expect(browserPath(TOOLS.chromium, {}, exists(['/usr/bin/chromium', '/snap/bin/chromium']))).toBe(
      '/usr/bin/chromium',
    );
    expect(browserPath(TOOLS.firefox, {}, exists(['/snap/bin/firefox']))).toBe('/snap/bin/firefox');
    expect(browserPath(TOOLS.firefox, {}, exists([]))).toBe('/usr/bin/firefox-esr');
  });

  it('the distribution from /etc/os-release', () => {
    expect(distroOf('PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nID=debian\nVERSION_CODENAME=trixie\n')).toBe('debian');
    expect(distroOf('NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n')).toBe('ubuntu');
    expect(distroOf('ID=linuxmint\nID_LIKE="ubuntu debian"\n')).toBe('ubuntu');
    expect(distroOf('ID=raspbian\nID_LIKE=debian\n')).toBe('debian');
    expect(distroOf('ID="fedora"\n')).toBe('other');
    expect(distroOf('')).toBe('other');
  });
});
