import { createRequire, Module } from 'node:module';

const require = createRequire(import.meta.url);

/**
 * Puts `replacement` where kafkajs will require the module `path` (a path inside kafkajs), marked
 * with `fixed` so that a second evaluation of the fix (a test runner's) recognises the first one's.
 * kafkajs captures such a module when `capturedBy` loads: if that already happened (an embedding
 * program loaded kafkajs first), it is too late for this process, and `warning` says so with `code`.
 */
export function replaceKafkajsModule(options: {
  path: string;
  replacement: object;
  fixed: symbol;
  capturedBy: string;
  warning: string;
  code: string;
}): void {
  const path = require.resolve(options.path);
  (options.replacement as Record<symbol, boolean>)[options.fixed] = true;
  if ((require.cache[path]?.exports as Record<symbol, unknown> | undefined)?.[options.fixed]) return;
  if (require.cache[require.resolve(options.capturedBy)]) {
    process.emitWarning(options.warning, { code: options.code });
    return;
  }
  const module = new Module(path);
  module.filename = path;
  module.loaded = true;
  module.exports = options.replacement;
  require.cache[path] = module;
}
