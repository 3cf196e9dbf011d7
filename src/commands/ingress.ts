import type { Command } from 'commander';

// Placeholder registration so that the CLI entry is wired once; the ingress work replaces this file.
export function registerIngressCommand(program: Command): void {
  program
    .command('ingress')
    .description('run the ingress role (in progress)')
    .action(() => {
      throw new Error('msgbridge ingress is not built yet');
    });
}
