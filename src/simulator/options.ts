import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { recipientNumber } from '../contracts/common.js';
import { DEFAULT_CONFIG_PATH, deepMerge, type DeepPartial } from '../config/load.js';
import {
  simulatorFaultsSchema,
  simulatorSchema,
  type Config,
  type SimulatorConfig,
  type SimulatorFaults,
} from '../config/schema.js';
import { MsgbridgeError } from '../platform/errors.js';
import { silentLogger, type Logger } from '../platform/logger.js';

export interface SimulatorBusiness {
  id: string;
  /** The key callers must send in X-API-Key. */
  apiKey: string;
  /** Signs every webhook delivered for this business. */
  signingSecret: string;
  /** The business's WhatsApp number (sender of its status events); derived from the id when absent. */
  number?: string;
}

/**
 * Options of `startSimulator`. Everything but `businesses` is optional: the defaults are
 * those of the `simulator` section of config/default.json, so that the command, the tests
 * and `msgbridge dev` read them from one place.
 */
export interface SimulatorOptions extends DeepPartial<
  Omit<SimulatorConfig, 'faults' | 'businessNumbers' | 'templates'>
> {
  businesses: SimulatorBusiness[];
  logger?: Logger;
  /** Replaces the default templates (unlike the config file, which adds to them). */
  templates?: SimulatorConfig['templates'];
  faults?: Partial<SimulatorFaults>;
  /** Clock, for tests of the conversation window. */
  now?: () => number;
}

export interface CompiledBusiness {
  id: string;
  apiKey: string;
  signingSecret: string;
  number: string;
}

export interface CompiledSimulatorOptions extends Omit<SimulatorConfig, 'businessNumbers'> {
  businesses: Map<string, CompiledBusiness>;
  logger: Logger;
  now: () => number;
}

let defaults: SimulatorConfig | undefined;

/** The `simulator` section of config/default.json. */
export function simulatorDefaults(): SimulatorConfig {
  if (!defaults) {
    const raw = JSON.parse(readFileSync(DEFAULT_CONFIG_PATH, 'utf8')) as { simulator?: unknown };
    defaults = simulatorSchema.parse(raw.simulator);
  }
  return structuredClone(defaults);
}

/** A stable WhatsApp-looking number for a business that has none configured. */
export function derivedBusinessNumber(businessId: string): string {
  const digits = BigInt(`0x${createHash('sha256').update(businessId).digest('hex').slice(0, 12)}`) % 10_000_000n;
  return `+1555${digits.toString().padStart(7, '0')}`;
}

const businessOptionSchema = z.strictObject({
  id: z.string().regex(/^[A-Za-z0-9_.-]{1,128}$/, 'expected 1-128 letters, digits, _ . or -'),
  apiKey: z.string().min(1, 'an API key is required'),
  signingSecret: z.string().min(1, 'a signing secret is required'),
  number: recipientNumber.optional(),
});

/** Defaults applied and everything validated once; a bad option names its field. */
export function compileSimulatorOptions(options: SimulatorOptions): CompiledSimulatorOptions {
  const { businesses, logger, now, templates, faults, ...rest } = options;
  const merged = deepMerge(simulatorDefaults() as unknown as Record<string, unknown>, rest as Record<string, unknown>);
  if (templates !== undefined) merged.templates = templates;
  if (faults !== undefined) merged.faults = { ...(merged.faults as object), ...faults };
  const parsed = simulatorSchema.safeParse(merged);
  if (!parsed.success) throw optionsError(parsed.error, 'simulator');
  const list = z.array(businessOptionSchema).min(1, 'at least one business is required').safeParse(businesses);
  if (!list.success) throw optionsError(list.error, 'businesses');

  const compiled = new Map<string, CompiledBusiness>();
  for (const business of list.data) {
    if (compiled.has(business.id))
      throw new MsgbridgeError('CONFIG_INVALID', `businesses: duplicate business id "${business.id}"`);
    compiled.set(business.id, {
      id: business.id,
      apiKey: business.apiKey,
      signingSecret: business.signingSecret,
      number: business.number ?? parsed.data.businessNumbers[business.id] ?? derivedBusinessNumber(business.id),
    });
  }
  const { businessNumbers: _numbers, ...config } = parsed.data;
  return { ...config, businesses: compiled, logger: logger ?? silentLogger, now: now ?? Date.now };
}

/**
 * The simulator's options from the whole configuration. Each business needs an API key and a
 * signing secret here (the simulator plays the provider, which issued both); during a rotation
 * the first listed secret signs.
 */
export function simulatorOptionsFromConfig(config: Config, extra: { logger?: Logger } = {}): SimulatorOptions {
  if (config.businesses.length === 0) {
    throw new MsgbridgeError(
      'CONFIG_INVALID',
      'invalid configuration:\n  - businesses: the simulator needs at least one business (for example MSGBRIDGE_BUSINESS_ID, MSGBRIDGE_API_KEY and MSGBRIDGE_SIGNING_SECRET)',
    );
  }
  const problems: string[] = [];
  config.businesses.forEach((b, i) => {
    if (b.apiKey === null)
      problems.push(`  - businesses.${i}.apiKey: business "${b.id}" has no API key (MSGBRIDGE_API_KEY)`);
    if (b.signingSecrets.length === 0)
      problems.push(
        `  - businesses.${i}.signingSecrets: business "${b.id}" has no signing secret (MSGBRIDGE_SIGNING_SECRET)`,
      );
  });
  if (problems.length > 0) throw new MsgbridgeError('CONFIG_INVALID', `invalid configuration:\n${problems.join('\n')}`);
  const { businessNumbers, ...simulator } = config.simulator;
  return {
    ...simulator,
    businesses: config.businesses.map((b) => ({
      id: b.id,
      apiKey: b.apiKey!,
      signingSecret: b.signingSecrets[0]!,
      ...(businessNumbers[b.id] ? { number: businessNumbers[b.id] } : {}),
    })),
    ...(extra.logger ? { logger: extra.logger } : {}),
  };
}

/** Faults with nothing injected (what `DELETE /sim/faults` restores). */
export const NO_FAULTS: SimulatorFaults = {
  sendLatencyMs: { min: 0, max: 0 },
  send429Rate: 0,
  send429RetryAfterSeconds: 1,
  send5xxRate: 0,
  sendRateLimitPerSecond: null,
  duplicateDeliveryRate: 0,
  reorderDeliveries: false,
  deliveryDelayMs: 0,
  badSignatureRate: 0,
};

/** A partial update of the faults, as `PUT /sim/faults` takes it: unknown keys are refused. */
export const faultsPatchSchema = simulatorFaultsSchema.partial();

function optionsError(error: z.ZodError, prefix: string): MsgbridgeError {
  const lines = error.issues.map((issue) => `  - ${[prefix, ...issue.path.map(String)].join('.')}: ${issue.message}`);
  return new MsgbridgeError('CONFIG_INVALID', `invalid simulator options:\n${lines.join('\n')}`);
}
