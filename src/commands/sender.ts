import type { Command } from 'commander';

// Placeholder registration so that the CLI entry is wired once; the sender work replaces this file.
export function registerSenderCommand(program: Command): void {
  program
    .command('sender')
    .description('run the sender role (in progress)')
    .action(() => {
      throw new Error('msgbridge sender is not built yet');
    });
}
