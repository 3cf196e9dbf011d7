import type { RecordProducer } from './port.js';

const noop = () => {};

/**
 * The one place of the rule "a producer that failed a produce is never reused" (README "A
 * failed producer is never reused"): it holds the producer in use and hands it out; a failed
 * one is discarded and disconnected, so whatever is sent next goes through a new producer (a
 * new producer id). Who connects the new one, and when, is the holder's: the sender's outcome
 * publisher connects one lazily for its next batch, a publisher lane at once, racing several.
 */
export class ReplaceableProducer {
  private producer: RecordProducer | undefined;
  private closedNow = false;

  /** The producer in use, if any. */
  get current(): RecordProducer | undefined {
    return this.producer;
  }

  /** Closed: no producer is taken from now on. */
  get closed(): boolean {
    return this.closedNow;
  }

  /** `producer` (connected, or being connected by the caller) becomes the one in use. */
  use(producer: RecordProducer): void {
    this.producer = producer;
  }

  /**
   * The producer in use, else a new one from `create`, connected now (disconnected again when
   * it cannot connect: rejects). Undefined when this closed while it connected (then it is
   * disconnected too).
   */
  async connected(create: () => RecordProducer): Promise<RecordProducer | undefined> {
    if (this.producer) return this.producer;
    const producer = create();
    try {
      await producer.connect();
    } catch (error) {
      await producer.disconnect().catch(noop);
      throw error;
    }
    if (this.closedNow) {
      await producer.disconnect().catch(noop);
      return undefined;
    }
    this.producer = producer;
    return producer;
  }

  /**
   * `producer` failed a produce (or a request that stands for one): when it is still the one in
   * use, it is dropped and disconnected in the background, never used again; true then.
   */
  discard(producer: RecordProducer): boolean {
    if (this.producer !== producer) return false;
    this.producer = undefined;
    void producer.disconnect().catch(noop);
    return true;
  }

  /** No producer from now on: returns the one in use, for the caller to disconnect. */
  close(): RecordProducer | undefined {
    this.closedNow = true;
    const producer = this.producer;
    this.producer = undefined;
    return producer;
  }
}
