/**
 * An interval that runs only while there is work, so that an idle process is not woken for
 * nothing: `start()` begins it (again after it ended; a no-op while it runs), and a tick whose
 * `tick()` answers false ends it. Whoever brings new work calls `start()`. Unref'd: it never
 * holds the process open.
 */
export class WorkInterval {
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly periodMs: number,
    private readonly tick: () => boolean,
  ) {}

  start(): void {
    if (this.timer !== undefined) return;
    this.timer = setInterval(() => {
      if (!this.tick()) this.stop();
    }, this.periodMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }
}
