// @ts-check
// npm's prestart and pretest: what the command needs from the system is there, or installed now
// (as root, with apt), or the command stops at once with one line naming what to run. Decisions:
// prerequisites-plan.mjs. MSGBRIDGE_PREREQUISITES=check only checks (it never installs).
//   node scripts/prerequisites.mjs start|test
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { browserPath, distroOf, planPrerequisites, toolsFor } from './prerequisites-plan.mjs';

const purpose = process.argv[2];
if (purpose !== 'start' && purpose !== 'test') {
  console.error(`prerequisites: expected start or test, got ${purpose ?? 'nothing'}`);
  process.exit(2);
}
const env = process.env;

/** @param {string} path */
const executable = (path) => {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
};
/** @param {string} command */
const onPath = (command) =>
  (env.PATH ?? '').split(delimiter).some((dir) => dir !== '' && executable(join(dir, command)));

/** The embedded broker's jars are cached (src/local-kafka/local-broker.ts, ensureKafkaJars). */
function jarsCached() {
  const pom = readFileSync(new URL('../config/kafka-pom.xml', import.meta.url), 'utf8');
  const version = /<kafka\.version>([^<]+)<\/kafka\.version>/.exec(pom)?.[1];
  const cache = env.MSGBRIDGE_CACHE_DIR || join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'msgbridge');
  return version !== undefined && existsSync(join(cache, `kafka-${version}`, 'libs', '.complete'));
}

const tools = toolsFor(purpose, { env, jarsCached: jarsCached() });
/** @param {import('./prerequisites-plan.mjs').Tool} tool */
const absent = (tool) => (tool.pathVariable ? !executable(browserPath(tool, env, existsSync)) : !onPath(tool.name));
const missing = tools.filter(absent);
const osRelease = existsSync('/etc/os-release') ? readFileSync('/etc/os-release', 'utf8') : '';
const plan = planPrerequisites({
  purpose,
  missing,
  env,
  isRoot: process.getuid?.() === 0 && env.MSGBRIDGE_PREREQUISITES !== 'check',
  hasApt: onPath('apt-get'),
  distro: distroOf(osRelease),
});

if (plan.action === 'stop') {
  console.error(plan.line);
  process.exit(1);
}
if (plan.action === 'install') {
  console.error(
    `msgbridge: \`npm ${purpose}\` needs ${plan.missing.join(', ')}: installing ${[...plan.apt, ...plan.snap].join(' ')}`,
  );
  /** @param {string} command @param {string[]} args */
  const run = (command, args) => {
    const result = spawnSync(command, args, {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: { ...env, DEBIAN_FRONTEND: 'noninteractive' },
    });
    if (result.status !== 0) {
      console.error(
        `msgbridge: \`${command} ${args.join(' ')}\` failed (${result.error?.message ?? `exit ${result.status}`})`,
      );
      process.exit(1);
    }
  };
  if (plan.apt.length > 0) {
    run('apt-get', ['update', '-qq']);
    run('apt-get', ['install', '-y', '-qq', ...plan.apt]);
  }
  // The prometheus package starts its server where services may start; only promtool is wanted.
  if (plan.stopServices.length > 0) {
    if (onPath('systemctl')) spawnSync('systemctl', ['disable', '--now', ...plan.stopServices], { stdio: 'ignore' });
    if (onPath('service'))
      for (const service of plan.stopServices) spawnSync('service', [service, 'stop'], { stdio: 'ignore' });
  }
  if (plan.snap.length > 0) run('snap', ['install', ...plan.snap]);
  const still = tools.filter(absent);
  if (still.length > 0) {
    console.error(`msgbridge: still missing after the install: ${still.map((t) => t.what).join(', ')}`);
    process.exit(1);
  }
}
