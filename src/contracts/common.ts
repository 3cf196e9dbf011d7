import { z } from 'zod';

/** Seconds since the Unix epoch, as decimal digits (the provider sends strings). */
export const epochSecondsString = z
  .string()
  .regex(/^\d{1,12}$/, 'expected decimal digits (seconds since the Unix epoch)');

/**
 * A party on a channel. Lenient: providers add fields such as `name` (possibly null),
 * so unknown keys are kept.
 */
export const partySchema = z.looseObject({
  channelType: z.string().min(1),
  id: z.string().min(1),
  name: z.string().nullable().optional(),
});
export type Party = z.infer<typeof partySchema>;

/** `statusUpdate.error`, and the body of the provider's HTTP error answers. */
export const providerErrorSchema = z.looseObject({
  message: z.string(),
  type: z.string().min(1),
  code: z.string().min(1),
  userTitle: z.string().optional(),
  userMessage: z.string().optional(),
  cntTraceId: z.string().optional(),
  details: z.record(z.string(), z.unknown()).nullable().optional(),
});
export type ProviderError = z.infer<typeof providerErrorSchema>;

/** A phone number in international format, or the opaque numeric form the provider also uses. */
export const recipientNumber = z
  .string()
  .regex(/^\+?[0-9]{5,20}$/, 'expected a phone number in international format (+ and 5-20 digits)');
