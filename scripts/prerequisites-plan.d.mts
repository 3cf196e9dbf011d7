// Types of prerequisites-plan.mjs, for the TypeScript that imports it (the tests, the browser helper).
export type Purpose = 'start' | 'test';
export type Distro = 'debian' | 'ubuntu' | 'other';
export interface Tool {
  name: string;
  what: string;
  apt: Record<'debian' | 'ubuntu', string>;
  pathVariable?: string;
  snap?: string;
}
export type Plan = { action: 'none' } | { action: 'install'; apt: string[]; snap: string[]; stopServices: string[]; missing: string[] } | { action: 'stop'; line: string };
export const TOOLS: Record<'java' | 'mvn' | 'openssl' | 'promtool' | 'chromium' | 'firefox', Tool>;
export function browserPath(tool: Tool, env: Record<string, string | undefined>, exists: (path: string) => boolean): string;
export function toolsFor(purpose: Purpose, facts: { env: Record<string, string | undefined>; jarsCached: boolean }): Tool[];
export function planPrerequisites(facts: { purpose: Purpose; missing: Tool[]; env: Record<string, string | undefined>; isRoot: boolean; hasApt: boolean; distro: Distro }): Plan;
export function distroOf(osRelease: string): Distro;
