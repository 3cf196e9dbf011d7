import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { monotonicFactory } from 'ulid';
import { z } from 'zod';
import { webhookRegistrationSchema, webhookTopicSchema, type WebhookTopic } from '../contracts/index.js';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';

export interface Registration {
  id: string;
  businessId: string;
  topic: WebhookTopic;
  address: string;
  createdAt: string;
}

const registrationSchema = z.strictObject({
  id: z.string().min(1),
  businessId: z.string().min(1),
  topic: webhookTopicSchema,
  address: webhookRegistrationSchema.shape.address,
  createdAt: z.iso.datetime(),
});
const fileSchema = z.strictObject({ version: z.literal(1), registrations: z.array(registrationSchema) });

export type CreateResult = { created: boolean; registration: Registration } | { limitReached: true };

/**
 * Webhook registrations per business and topic. Creating the same topic and address twice
 * returns the first registration. With a file, every change is written through (to a
 * temporary file renamed over the old one, so a crash never leaves half a file).
 */
export class Registrations {
  private readonly byBusiness = new Map<string, Registration[]>();
  private readonly nextId = monotonicFactory();

  constructor(private readonly options: { file: string | null; maxPerBusiness: number; now: () => number }) {
    if (options.file !== null) this.load(options.file);
  }

  create(businessId: string, topic: WebhookTopic, address: string): CreateResult {
    const list = this.byBusiness.get(businessId) ?? [];
    const existing = list.find((r) => r.topic === topic && r.address === address);
    if (existing) return { created: false, registration: existing };
    if (list.length >= this.options.maxPerBusiness) return { limitReached: true };
    const registration: Registration = {
      id: this.nextId(),
      businessId,
      topic,
      address,
      createdAt: new Date(this.options.now()).toISOString(),
    };
    this.byBusiness.set(businessId, [...list, registration]);
    this.save();
    return { created: true, registration };
  }

  list(businessId: string): Registration[] {
    return [...(this.byBusiness.get(businessId) ?? [])];
  }

  forTopic(businessId: string, topic: WebhookTopic): Registration[] {
    return (this.byBusiness.get(businessId) ?? []).filter((r) => r.topic === topic);
  }

  all(): Registration[] {
    return [...this.byBusiness.values()].flat();
  }

  delete(businessId: string, id: string): Registration | undefined {
    const list = this.byBusiness.get(businessId) ?? [];
    const found = list.find((r) => r.id === id);
    if (!found) return undefined;
    this.byBusiness.set(
      businessId,
      list.filter((r) => r.id !== id),
    );
    this.save();
    return found;
  }

  private load(file: string): void {
    if (!existsSync(file)) return;
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new MsgbridgeError(
        'CONFIG_INVALID',
        `simulator.registrationsFile ${file} is not valid JSON: ${errorMessage(err)}`,
        { cause: err },
      );
    }
    const parsed = fileSchema.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new MsgbridgeError(
        'CONFIG_INVALID',
        `simulator.registrationsFile ${file}: ${issue?.path.map(String).join('.') || '(root)'}: ${issue?.message}`,
      );
    }
    for (const r of parsed.data.registrations) {
      const list = this.byBusiness.get(r.businessId) ?? [];
      if (!list.some((x) => x.topic === r.topic && x.address === r.address)) list.push(r);
      this.byBusiness.set(r.businessId, list);
    }
  }

  private save(): void {
    const file = this.options.file;
    if (file === null) return;
    mkdirSync(dirname(file), { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, `${JSON.stringify({ version: 1, registrations: this.all() }, null, 2)}\n`);
    renameSync(tmp, file);
  }
}
