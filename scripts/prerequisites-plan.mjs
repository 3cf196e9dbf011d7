// @ts-check
// What `npm start` and `npm test` need from the system, and what to do when some of it is
// missing: pure logic (the facts come in, a decision goes out), tested by
// test/scripts/prerequisites.test.ts. Plain JavaScript so that it runs before anything is built,
// in a tenth of a second (scripts/prerequisites.mjs runs it from npm's prestart and pretest).

/** @typedef {'start' | 'test'} Purpose */
/** @typedef {'debian' | 'ubuntu' | 'other'} Distro */
/**
 * @typedef {object} Tool
 * @property {string} name what is looked for: a command on the PATH, or a browser's binary
 * @property {string} what in words, for the line a user reads
 * @property {Record<'debian' | 'ubuntu', string>} apt the package that brings it
 * @property {string} [pathVariable] a browser: the variable naming another binary (test/helpers/browsers.ts)
 * @property {string} [snap] a browser Ubuntu ships only as a snap: the snap, installed at /snap/bin/<snap>
 */

/** @type {Record<string, Tool>} */
export const TOOLS = {
  java: { name: 'java', what: 'Java 17+', apt: { debian: 'default-jre-headless', ubuntu: 'openjdk-17-jre-headless' } },
  mvn: { name: 'mvn', what: 'Maven', apt: { debian: 'maven', ubuntu: 'maven' } },
  openssl: { name: 'openssl', what: 'openssl', apt: { debian: 'openssl', ubuntu: 'openssl' } },
  promtool: { name: 'promtool', what: 'promtool', apt: { debian: 'prometheus', ubuntu: 'prometheus' } },
  chromium: {
    name: 'chromium',
    what: 'Chromium',
    apt: { debian: 'chromium', ubuntu: 'chromium' },
    pathVariable: 'CHROMIUM_PATH',
    snap: 'chromium',
  },
  firefox: {
    name: 'firefox-esr',
    what: 'Firefox ESR',
    apt: { debian: 'firefox-esr', ubuntu: 'firefox-esr' },
    pathVariable: 'FIREFOX_PATH',
    snap: 'firefox',
  },
  tinyproxy: { name: 'tinyproxy', what: 'tinyproxy', apt: { debian: 'tinyproxy', ubuntu: 'tinyproxy' } },
};

/**
 * Where a browser's binary is: the one its variable names, else the distribution's (Debian's
 * package, or Ubuntu's snap), else where Debian's would be.
 * @param {Tool} tool
 * @param {Record<string, string | undefined>} env
 * @param {(path: string) => boolean} exists
 */
export function browserPath(tool, env, exists) {
  const named = tool.pathVariable ? env[tool.pathVariable] : undefined;
  if (named) return named;
  const candidates = [`/usr/bin/${tool.name}`, ...(tool.snap ? [`/snap/bin/${tool.snap}`] : [])];
  return candidates.find(exists) ?? /** @type {string} */ (candidates[0]);
}

/**
 * The tools a purpose needs. The embedded Kafka needs Java, and Maven until its jars are cached;
 * with KAFKA_BROKERS, `npm start` uses that cluster instead. The tests always start brokers of
 * their own (a three-node cluster, secured nodes), make a CA with openssl, check the alert rules
 * with promtool, drive the console in both browsers and send provider calls through tinyproxy.
 * @param {Purpose} purpose
 * @param {{ env: Record<string, string | undefined>, jarsCached: boolean }} facts
 * @returns {Tool[]}
 */
export function toolsFor(purpose, { env, jarsCached }) {
  const kafka = purpose === 'start' && env.KAFKA_BROKERS ? [] : [TOOLS.java, ...(jarsCached ? [] : [TOOLS.mvn])];
  const tests =
    purpose === 'test' ? [TOOLS.openssl, TOOLS.promtool, TOOLS.chromium, TOOLS.firefox, TOOLS.tinyproxy] : [];
  return /** @type {Tool[]} */ ([...kafka, ...tests]);
}

/**
 * @typedef {{ action: 'none' }
 *   | { action: 'install', apt: string[], snap: string[], stopServices: string[], missing: string[] }
 *   | { action: 'stop', line: string }} Plan
 */

/**
 * What to do about the missing tools: nothing; install them (as root, with apt, or snap for
 * Ubuntu's browsers); or stop with one line naming the exact command to run.
 * @param {{ purpose: Purpose, missing: Tool[], env: Record<string, string | undefined>, isRoot: boolean, hasApt:
 * boolean, distro: Distro }} facts
 * @returns {Plan}
 */
export function planPrerequisites({ purpose, missing, env, isRoot, hasApt, distro }) {
  if (missing.length === 0) return { action: 'none' };
  const names = missing.map((t) => t.what).join(', ');
  const need = `msgbridge: \`npm ${purpose}\` needs ${names}`;
  // A browser named by its variable is that one: installing the distribution's would not help.
  const named = missing.find((t) => t.pathVariable && env[t.pathVariable]);
  if (named?.pathVariable)
    return {
      action: 'stop',
      line: `${need}: ${named.pathVariable}=${env[named.pathVariable]} does not exist; unset it, or name the binary`,
    };
  if (!hasApt || distro === 'other') {
    return {
      action: 'stop',
      line: `${need}, not found: install them (on Debian: apt-get install ${missing.map((t) => t.apt.debian).join(' ')})`,
    };
  }
  const family = distro;
  const snap = family === 'ubuntu' ? missing.filter((t) => t.snap).map((t) => /** @type {string} */ (t.snap)) : [];
  const apt = missing.filter((t) => !(family === 'ubuntu' && t.snap)).map((t) => t.apt[family]);
  // The prometheus and tinyproxy packages start their servers; the tests run their own.
  const stopServices = [
    ...(apt.includes('prometheus') ? ['prometheus', 'prometheus-node-exporter'] : []),
    ...(apt.includes('tinyproxy') ? ['tinyproxy'] : []),
  ];
  if (isRoot) return { action: 'install', apt, snap, stopServices, missing: missing.map((t) => t.name) };
  const commands = [];
  if (apt.length > 0) commands.push(`sudo apt-get update && sudo apt-get install -y ${apt.join(' ')}`);
  if (stopServices.length > 0) commands.push(`sudo systemctl disable --now ${stopServices.join(' ')}`);
  if (snap.length > 0) commands.push(`sudo snap install ${snap.join(' ')}`);
  return { action: 'stop', line: `${need}, not found: run  ${commands.join(' && ')}` };
}

/**
 * The distribution family from /etc/os-release (ID, then ID_LIKE); apt-based ones other than
 * Debian and Ubuntu are taken as Debian's kin when they say so.
 * @param {string} osRelease
 * @returns {Distro}
 */
export function distroOf(osRelease) {
  const field = (/** @type {string} */ key) =>
    new RegExp(`^${key}="?([^"\\n]*)"?$`, 'm').exec(osRelease)?.[1]?.split(/\s+/) ?? [];
  const ids = [...field('ID'), ...field('ID_LIKE')];
  if (ids.includes('ubuntu')) return 'ubuntu';
  if (ids.includes('debian')) return 'debian';
  return 'other';
}
