import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.cache/**', 'schemas/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-restricted-imports': 'off',
    },
  },
  {
    // Pure logic stays framework-free: adapters live at the edge.
    files: ['src/contracts/**', 'src/config/**', 'src/ingress/handle-webhook.ts', 'src/sender/keyed-runner.ts', 'src/sender/retry-policy.ts', 'src/sender/rate-limiter.ts', 'src/sender/circuit-breaker.ts', 'src/kafka/batching-publisher.ts', 'src/tracker/state-rules.ts', 'src/tracker/window-rules.ts', 'src/tracker/state-cache.ts', 'src/tracker/tracker-logic.ts', 'src/sender/conversation-guard.ts', 'src/sender/conversation-table.ts'],
    rules: {
      'no-restricted-imports': ['error', { paths: ['uWebSockets.js', 'kafkajs', 'undici'] }],
    },
  },
);
