import type { Command } from 'commander';

// Placeholder registration so that the CLI entry is wired once; the simulator work replaces this file.
export function registerSimulatorCommand(program: Command): void {
  program
    .command('simulator')
    .description('run the simulator role (in progress)')
    .action(() => {
      throw new Error('msgbridge simulator is not built yet');
    });
}
