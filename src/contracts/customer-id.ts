/**
 * One customer, whatever form the provider wrote their id in (docs/topics.md,
 * "Customers"). A party's id arrives as a phone number in international format (`+15550002222`,
 * what businesses send to) or as the same digits without the `+` (`15550002222`, how
 * WhatsApp-style platforms write a customer in inbound events): both name one customer. Any
 * other id (an opaque, business-scoped one) is compared as it is.
 *
 * The canonical form is the digits without the `+`: the form inbound events carry, so the key
 * of `messages` stays what the ingress always wrote for them. Events keep the provider's bytes;
 * the canonical form is used where ids are compared: keys, indexes, lookups.
 */

const NUMERIC = /^\+?[0-9]+$/;

/** The canonical form of a customer id: a numeric id without its leading `+`; any other id unchanged. */
export function canonicalCustomerId(id: string): string {
  return NUMERIC.test(id) ? (id.charCodeAt(0) === 43 /* + */ ? id.slice(1) : id) : id;
}

/** Whether two customer ids name the same customer. */
export function sameCustomer(a: string, b: string): boolean {
  return canonicalCustomerId(a) === canonicalCustomerId(b);
}

/** The channels the provider names: the 24-hour conversation rule and delivery statuses are WhatsApp's only. */
export const CHANNEL = { whatsapp: 'whatsapp', sms: 'sms' } as const;

/** A party's `channelType` as the relay compares it (the provider writes lower case; a producer may not). */
export function channelOf(channelType: string): string {
  return channelType.toLowerCase();
}

/** Whether a channel is SMS: no conversation window, and the provider sends no delivery status for it. */
export function isSms(channelType: string | null | undefined): boolean {
  return typeof channelType === 'string' && channelOf(channelType) === CHANNEL.sms;
}
