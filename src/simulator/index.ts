import type { SimulatorFaults } from '../config/schema.js';
import { webhookRegistrationSchema } from '../contracts/index.js';
import { ProviderSimulator, type InboundInput, type InboundResult, type SendRecord } from './api.js';
import type { DeliveryFilter, DeliveryRecord } from './deliveries.js';
import type { MessageRecord } from './lifecycle.js';
import { compileSimulatorOptions, type SimulatorOptions } from './options.js';
import type { Registration } from './registrations.js';
import { listenSimulator } from './server.js';
import { localUrl } from '../platform/net.js';

export type { SimulatorOptions, SimulatorBusiness } from './options.js';
export { simulatorOptionsFromConfig, simulatorDefaults, NO_FAULTS } from './options.js';
export type { SendRecord, InboundInput, InboundResult } from './api.js';
export type { DeliveryRecord, DeliveryAttempt, DeliveryFilter, DeliveryState } from './deliveries.js';
export type { MessageRecord, StatusChange, MessagePlan } from './lifecycle.js';
export type { Registration } from './registrations.js';
export { runWebhookLoad, type WebhookLoadOptions, type WebhookLoadReport } from './load-generator.js';

export interface RunningSimulator {
  /** http://127.0.0.1:PORT (the loopback address when listening on all interfaces). */
  url: string;
  port: number;
  /** The same operations as the `/sim/` endpoints, for in-process use. */
  injectInbound(businessId: string, input: InboundInput): InboundResult;
  setFaults(patch: Partial<SimulatorFaults>): SimulatorFaults;
  resetFaults(): SimulatorFaults;
  getFaults(): SimulatorFaults;
  sends(): SendRecord[];
  deliveries(filter?: DeliveryFilter): DeliveryRecord[];
  message(id: string): MessageRecord | undefined;
  registerWebhook(businessId: string, topic: 'messages' | 'delivery_status', address: string): Registration;
  webhooks(businessId: string): Registration[];
  /** Resolves once no status change and no webhook delivery is pending (rejects after `timeoutMs`). */
  idle(timeoutMs?: number): Promise<void>;
  /** Stops listening, cancels pending status changes and deliveries, closes connections. */
  close(): Promise<void>;
}

/** Starts the provider simulator on `host:port` (port 0 picks a free one). */
export async function startSimulator(options: SimulatorOptions): Promise<RunningSimulator> {
  const compiled = compileSimulatorOptions(options);
  const simulator = new ProviderSimulator(compiled);
  let server;
  try {
    server = await listenSimulator({
      host: compiled.host,
      port: compiled.port,
      maxBodyBytes: compiled.maxBodyBytes,
      logger: compiled.logger,
      handle: (req) => simulator.handle(req),
    });
  } catch (err) {
    await simulator.close();
    throw err;
  }
  const url = localUrl(compiled.host, server.port);
  compiled.logger.info(
    { url, businesses: [...compiled.businesses.keys()], registrations: simulator.registrations.all().length },
    'provider simulator listening',
  );

  let closing: Promise<void> | undefined;
  return {
    url,
    port: server.port,
    injectInbound: (businessId, input) => simulator.injectInbound(businessId, input),
    setFaults(patch) {
      const result = simulator.faults.patch(patch);
      if (!result.ok) throw new Error(result.message);
      return result.faults;
    },
    resetFaults: () => simulator.faults.reset(),
    getFaults: () => simulator.getFaults(),
    sends: () => simulator.listSends(),
    deliveries: (filter) => simulator.listDeliveries(filter),
    message: (id) => simulator.message(id),
    registerWebhook(businessId, topic, address) {
      if (!compiled.businesses.has(businessId)) throw new Error(`unknown business "${businessId}"`);
      const input = webhookRegistrationSchema.parse({ topic, address });
      const result = simulator.registrations.create(businessId, input.topic, input.address);
      if ('limitReached' in result)
        throw new Error(`business "${businessId}" has reached its number of webhook registrations`);
      return result.registration;
    },
    webhooks: (businessId) => simulator.registrations.list(businessId),
    async idle(timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      while (!simulator.isIdle()) {
        if (Date.now() > deadline)
          throw new Error(`the simulator is still busy after ${timeoutMs} ms: ${JSON.stringify(simulator.stats())}`);
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    },
    close() {
      closing ??= (async () => {
        server.close();
        await simulator.close();
        compiled.logger.info('provider simulator stopped');
      })();
      return closing;
    },
  };
}
