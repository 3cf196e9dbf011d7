import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BROWSERS, launchBrowser, type TestBrowser as Browser, type TestPage as Page } from '../helpers/browsers.js';
import { kafkaBrokers, produce, uniqueTopic } from '../helpers/kafka.js';
import { runCli, startCli } from '../helpers/cli.js';
import { TEST_ACCESS_TOKENS, TEST_TOKENS } from './harness.js';

/**
 * The support console in real browsers (Debian's Chromium driven by playwright-core and Debian's
 * Firefox ESR driven by puppeteer-core over WebDriver BiDi, never a downloaded browser: see
 * test/helpers/browsers.ts) against one `msgbridge dev` on the suite's Kafka: the simulator,
 * ingress, sender and tracker of one process, started once for both browsers. A message sent
 * through the simulator is found by its phone number and shows `read` with its timeline; a
 * failed one shows its error and trace id; without a credential no data reaches the page; a
 * read-only user sees phone numbers masked on every page (tracker.maskRecipients), no redrive,
 * and is refused one; an operator's confirmed redrive sends a dead-lettered request once, and no
 * later redrive (any selection) produces it again (in Chromium: it happens once per process).
 * The customer's page is their conversation: they write as the provider writes inbound senders
 * (15550002222, no +), a text to +15550002222 goes through (one customer), a button reply, and an
 * SMS that ends at accepted, said so. With MSGBRIDGE_CONSOLE_SCREENSHOTS=1 the main pages are
 * written to docs/console/*.png (from Chromium); with MSGBRIDGE_CONSOLE_SHOTS_DIR=<dir>, the
 * conversation of both browsers to <dir>/<browser>-conversation.png.
 */
const SHOTS =
  process.env.MSGBRIDGE_CONSOLE_SCREENSHOTS === '1'
    ? join(import.meta.dirname, '..', '..', 'docs', 'console')
    : undefined;
const BOTH_BROWSERS_SHOTS = process.env.MSGBRIDGE_CONSOLE_SHOTS_DIR || undefined;
const suffix = uniqueTopic('console');
const CUSTOMER = '+15550002222';
/** The customer as the provider writes an inbound sender: the same number without its +. */
const CUSTOMER_AS_SENDER = CUSTOMER.slice(1);
const FAILING = '+15550000404';
const env: Record<string, string> = {
  KAFKA_BROKERS: '',
  MSGBRIDGE_INGRESS_PORT: '0',
  MSGBRIDGE_INGRESS_ADMIN_PORT: '0',
  MSGBRIDGE_SIMULATOR_PORT: '0',
  MSGBRIDGE_SENDER_ADMIN_PORT: '0',
  MSGBRIDGE__sender__groupId: `${suffix}-sender`,
  MSGBRIDGE__localKafka__cacheDir: JSON.stringify(mkdtempSync(join(tmpdir(), 'msgbridge-console-'))),
  MSGBRIDGE__kafka__topics__messages: `${suffix}-messages`,
  MSGBRIDGE__kafka__topics__deliveryStatus: `${suffix}-delivery_status`,
  MSGBRIDGE__kafka__topics__webhooksDlq: `${suffix}-webhooks-dlq`,
  MSGBRIDGE__kafka__topics__sendRequests: `${suffix}-send-requests`,
  MSGBRIDGE__kafka__topics__sendResults: `${suffix}-send-results`,
  MSGBRIDGE__kafka__topics__sendRequestsDlq: `${suffix}-send-requests-dlq`,
  MSGBRIDGE__kafka__topics__sendLedger: `${suffix}-send-ledger`,
  MSGBRIDGE_SENDER_STATE_DIR: mkdtempSync(join(tmpdir(), 'msgbridge-dev-sender-')),
  MSGBRIDGE__kafka__topics__messageState: `${suffix}-message-state`,
  MSGBRIDGE__kafka__topics__conversations: `${suffix}-conversations`,
  MSGBRIDGE__kafka__topics__requestOutcomes: `${suffix}-request-outcomes`,
  MSGBRIDGE__kafka__topics__inboundMessages: `${suffix}-inbound-messages`,
  MSGBRIDGE_TRACKER_PORT: '0',
  MSGBRIDGE_TRACKER_ADMIN_PORT: '0',
  MSGBRIDGE_TRACKER_STATE_DIR: mkdtempSync(join(tmpdir(), 'msgbridge-console-state-')),
  MSGBRIDGE__tracker__groupId: `${suffix}-tracker`,
  MSGBRIDGE__tracker__transactionalIdPrefix: `${suffix}-tracker`,
  // The suite's read-only token beside the operator token dev makes for itself.
  MSGBRIDGE__tracker__accessTokens: JSON.stringify(TEST_ACCESS_TOKENS),
  // Phone numbers masked for the read-only role (operators see them whole).
  MSGBRIDGE__tracker__maskRecipients: 'true',
};

let dev: ReturnType<typeof startCli>;
let browser: Browser;
let base: string;
let devToken: string;
let readMessageId: string;
let failedMessageId: string;
let smsMessageId: string;

async function newPage(width = 1280, height = 900): Promise<Page> {
  const page = await browser.newPage({ viewport: { width, height }, locale: 'en-US', timezoneId: 'Europe/Berlin' });
  page.on('pageerror', (error) => {
    throw error;
  });
  return page;
}

/** A page signed in with a token: the way the dev link does it, through the URL fragment. */
async function signedIn(token: string, path: string, width?: number): Promise<Page> {
  const page = await newPage(width);
  await page.goto(`${base}/console/#token=${token}`);
  await page.waitForSelector('#who:not([hidden])');
  await page.goto(`${base}${path}`);
  return page;
}

async function shot(page: Page, name: string) {
  if (!SHOTS || browser.name !== 'Chromium') return;
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

/** The page in every browser, to MSGBRIDGE_CONSOLE_SHOTS_DIR (outside the repository). */
async function shotEveryBrowser(page: Page, name: string) {
  if (!BOTH_BROWSERS_SHOTS) return;
  mkdirSync(BOTH_BROWSERS_SHOTS, { recursive: true });
  await page.screenshot({
    path: join(BOTH_BROWSERS_SHOTS, `${browser.name.toLowerCase()}-${name}.png`),
    fullPage: true,
  });
}

beforeAll(async () => {
  env.KAFKA_BROKERS = kafkaBrokers().join(',');
  dev = startCli(['dev', '--quiet'], env);
  const link = await dev.waitFor(/console\s+(http:\/\/\S+)\/console\/#token=(\S+)/);
  [, base, devToken] = link as unknown as [string, string, string];
  const simulatorUrl = (await dev.waitFor(/simulator\s+(http:\/\/\S+)/))[1]!;

  // The customer writes first (as 1555…: the provider's form of an inbound sender), then a text to
  // +1555… goes out and is read (one customer); they answer with a button; an SMS follows. A
  // template to a number not on WhatsApp fails.
  const inbound = await runCli(
    [
      'simulator',
      'inbound',
      '--business',
      'biz_1',
      '--from',
      CUSTOMER_AS_SENDER,
      '--text',
      'Hi! Where is my order?',
      '--name',
      'Ada',
      '--url',
      simulatorUrl,
    ],
    env,
  );
  expect(inbound.code, inbound.stderr).toBe(0);
  const sent = await runCli(
    [
      'send',
      'text',
      '--business',
      'biz_1',
      '--to',
      CUSTOMER,
      '--text',
      'Your order shipped',
      '--request-id',
      `${suffix}-ok`,
      '--timeout',
      '45',
    ],
    env,
    90_000,
  );
  expect(sent.code, `${sent.stdout}\n${sent.stderr}`).toBe(0);
  // A second later (inbound times are whole seconds): the button reply is newer than the text.
  await new Promise((r) => setTimeout(r, 1100));
  const button = await runCli(
    [
      'simulator',
      'inbound',
      '--business',
      'biz_1',
      '--from',
      CUSTOMER_AS_SENDER,
      '--text',
      'Deliver today',
      '--button',
      'deliver-today-42',
      '--url',
      simulatorUrl,
    ],
    env,
  );
  expect(button.code, button.stderr).toBe(0);
  const sms = await runCli(
    [
      'send',
      'text',
      '--business',
      'biz_1',
      '--to',
      CUSTOMER,
      '--channel',
      'sms',
      '--text',
      'Your code is 4242',
      '--request-id',
      `${suffix}-sms`,
      '--timeout',
      '45',
    ],
    env,
    90_000,
  );
  expect(sms.code, `${sms.stdout}\n${sms.stderr}`).toBe(0);
  expect(sms.stdout).toMatch(/SMS: handed to the SMS network/);
  const failed = await runCli(
    [
      'send',
      'template',
      '--business',
      'biz_1',
      '--to',
      FAILING,
      '--template',
      'order_update',
      '--param',
      'order=42',
      '--request-id',
      `${suffix}-fail`,
      '--timeout',
      '45',
    ],
    env,
    90_000,
  );
  expect(failed.code, `${failed.stdout}\n${failed.stderr}`).not.toBeNull();
  // Dead letters for the dead-letter page: one that fails again, and one a redrive sends (the
  // sender had not known biz_1 then; it does now).
  await produce(`${suffix}-send-requests-dlq`, [
    {
      key: 'r1',
      value: '{"not":"a request"',
      headers: { 'error-reason': 'not valid JSON', 'error-code': 'RELAY_INVALID_JSON', 'business-id': 'biz_1' },
    },
    {
      key: CUSTOMER,
      value: JSON.stringify({
        requestId: `${suffix}-redriven`,
        businessId: 'biz_1',
        type: 'text',
        recipient: { channelType: 'whatsapp', id: CUSTOMER },
        message: { text: 'Sent again' },
      }),
      headers: {
        'error-reason': 'unknown business "biz_1": it is not configured in this sender',
        'error-code': 'RELAY_UNKNOWN_BUSINESS',
        'business-id': 'biz_1',
        'source-topic': `${suffix}-send-requests`,
      },
    },
  ]);

  const ask = async (requestId: string) => {
    const res = await fetch(`${base}/requests/${requestId}`, { headers: { authorization: `Bearer ${devToken}` } });
    return res.status === 200 ? ((await res.json()) as { messageId: string; status: string }) : undefined;
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    const [ok, bad, text] = [await ask(`${suffix}-ok`), await ask(`${suffix}-fail`), await ask(`${suffix}-sms`)];
    const thread = await fetch(`${base}/thread?customer=${CUSTOMER_AS_SENDER}`, {
      headers: { authorization: `Bearer ${devToken}` },
    });
    const items = thread.status === 200 ? ((await thread.json()) as { items: unknown[] }).items : [];
    if (
      ok?.status === 'read' &&
      bad?.status === 'delivery_failed' &&
      text?.status === 'accepted' &&
      items.length === 4
    ) {
      readMessageId = ok.messageId;
      failedMessageId = bad.messageId;
      smsMessageId = text.messageId;
      break;
    }
    if (Date.now() > deadline)
      throw new Error(
        `the messages did not reach read, delivery_failed and accepted: ${JSON.stringify([ok, bad, text, items.length])}`,
      );
    await new Promise((r) => setTimeout(r, 500));
  }
}, 240_000);

afterAll(async () => {
  expect(await dev?.stop('SIGINT')).toBe(0);
});

// Each browser in turn against the same process: one browser running at a time.
describe.each(BROWSERS)('the support console in %s', (name) => {
  beforeAll(async () => {
    browser = await launchBrowser(name);
  }, 120_000);
  afterAll(async () => {
    await browser?.close();
  });

  it('finds a message by phone number, opens it, and shows read with its timeline, window and links', async () => {
    const page = await signedIn(devToken, '/console/');
    await shot(page, 'start');
    await page.fill('#q', CUSTOMER);
    await page.press('#q', 'Enter');
    await page.waitForSelector('table tbody tr');
    expect(new URL(page.url()).searchParams.get('q')).toBe(CUSTOMER);
    expect(await page.textContent('h1')).toBe(`Conversation with ${CUSTOMER}`);
    const row = page.locator('tbody tr', { hasText: readMessageId });
    expect(await row.locator('.badge').textContent()).toBe('read');
    await shot(page, 'search');
    await row.getByRole('link', { name: readMessageId }).click();
    await page.waitForSelector('.timeline');
    expect(new URL(page.url()).searchParams.get('message')).toBe(readMessageId);
    expect(await page.textContent('h1')).toBe('Message read');
    expect(await page.textContent('.send-summary')).toBe('1 attempt');
    const steps = await page.locator('.timeline .step-name').allTextContents();
    expect(steps).toEqual(['accepted', 'sent', 'delivered', 'read']);
    // Times in the viewer's zone, UTC on hover; the time between steps.
    const first = page.locator('.timeline time').first();
    expect(await first.getAttribute('title')).toMatch(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?Z UTC$/);
    expect(await page.locator('.timeline .delta').count()).toBe(3);
    expect(await page.textContent('#window-title + p')).toMatch(/open/);
    expect(await page.getByRole('link', { name: `${suffix}-ok` }).count()).toBe(1);
    expect(await page.getByRole('link', { name: "this customer's conversation" }).count()).toBe(1);
    expect(await page.textContent('dd.channel')).toBe('WhatsApp');
    await shot(page, 'message');
    // The same page at a phone's width: nothing wider than the screen.
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await page.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
    await shot(page, 'message-phone');
    await page.close();
  });

  it('a failed message shows its error with the trace id to quote to the provider', async () => {
    const page = await signedIn(devToken, `/console/?q=${encodeURIComponent(`${suffix}-fail`)}`);
    await page.waitForSelector('.error-card');
    expect(await page.textContent('h1')).toBe('Message failed');
    expect(await page.textContent('main')).toContain(failedMessageId);
    expect(await page.textContent('.error-card')).toContain('ERROR_CODE_PHONE_NUMBER_NOT_ON_WHATSAPP');
    expect(await page.locator('#trace-id').count()).toBe(1);
    expect(await page.locator('.timeline .step-name').allTextContents()).toEqual(['accepted', 'failed']);
    await shot(page, 'failed');
    await page.close();
  });

  it("lists a business's messages from its id alone, and links there from a message", async () => {
    const page = await signedIn(devToken, '/console/');
    await page.fill('#business', 'biz_1');
    await page.press('#business', 'Enter');
    await page.waitForSelector('table tbody tr');
    expect(new URL(page.url()).searchParams.get('business')).toBe('biz_1');
    expect(await page.textContent('h1')).toBe('Messages of business biz_1');
    expect(await page.locator('tbody tr', { hasText: readMessageId }).locator('.badge').textContent()).toBe('read');
    expect(await page.locator('tbody tr', { hasText: failedMessageId }).locator('.badge').textContent()).toBe('failed');
    await page.goto(`${base}/console/?message=${encodeURIComponent(readMessageId)}`);
    await page.waitForSelector('.timeline');
    await page.getByRole('link', { name: 'biz_1', exact: true }).click();
    await page.waitForSelector('table tbody tr');
    expect(await page.textContent('h1')).toBe('Messages of business biz_1');
    await page.close();
  });

  it('without a credential the page gets no data and says how to get a token; keyboard reaches the sign-in', async () => {
    const page = await newPage();
    const answers: number[] = [];
    page.on('response', (r) => {
      if (!r.url().includes('/console/')) answers.push(r.status());
    });
    await page.goto(`${base}/console/?q=${encodeURIComponent(CUSTOMER)}`);
    await page.waitForSelector('#token');
    expect(await page.textContent('h1')).toBe('Sign in');
    expect(await page.textContent('main')).toMatch(/Ask your msgbridge operator for a token/);
    expect(await page.textContent('body')).not.toContain(readMessageId);
    expect(answers.length).toBeGreaterThan(0);
    expect(answers.every((s) => s === 401)).toBe(true);
    // The field is labelled and focused.
    expect(await page.evaluate('document.activeElement?.id')).toBe('token');
    expect(await page.locator('label[for="token"]').textContent()).toBe('Access token');
    // Nobody is signed in: no "Sign out".
    expect(await page.getByRole('button', { name: 'Sign out' }).count()).toBe(0);
    await page.close();
  });

  it('by keyboard alone: the search field has the focus, Enter searches, Tab reaches the newest message and Enter opens it', async () => {
    const page = await signedIn(devToken, '/console/');
    await page.waitForSelector('#view-title');
    expect(await page.evaluate('document.activeElement?.id')).toBe('q');
    await page.keyboard.type(CUSTOMER);
    await page.keyboard.press('Enter');
    await page.waitForSelector('table tbody tr');
    expect(await page.textContent('h1')).toBe(`Conversation with ${CUSTOMER}`);
    // The new view has the focus (a screen reader reads it); the next Tab is its first link.
    expect(await page.evaluate('document.activeElement?.id')).toBe('main');
    await page.keyboard.press('Tab');
    const href = (await page.evaluate(
      "document.activeElement?.closest('tbody tr') ? document.activeElement.getAttribute('href') : null",
    )) as string | null;
    expect(href).toMatch(/^\/console\/\?message=/);
    await page.keyboard.press('Enter');
    await page.waitForSelector('.timeline');
    expect(page.url()).toBe(`${base}${href}`);
    expect(await page.evaluate('document.activeElement?.id')).toBe('main');
    await page.close();
  });

  it('a read-only user finds the customer by phone number but sees the number masked everywhere', async () => {
    const masked = `${CUSTOMER.slice(0, 5)}•••${CUSTOMER.slice(-4)}`;
    const page = await signedIn(TEST_TOKENS.read, `/console/?q=${encodeURIComponent(CUSTOMER)}`);
    await page.waitForSelector('table tbody tr');
    expect(await page.textContent('#who-name')).toContain('read only');
    expect(await page.textContent('main')).toContain(masked);
    expect(await page.textContent('body')).not.toContain(CUSTOMER);
    // The inbound sender, as the provider wrote it (no +), is masked too.
    expect(await page.textContent('main')).toContain(`${CUSTOMER_AS_SENDER.slice(0, 4)}•••${CUSTOMER.slice(-4)}`);
    expect(await page.textContent('body')).not.toContain(CUSTOMER_AS_SENDER);
    await page.locator('tbody tr', { hasText: readMessageId }).getByRole('link', { name: readMessageId }).click();
    await page.waitForSelector('.timeline');
    expect(await page.textContent('main')).toContain(masked);
    expect(await page.textContent('body')).not.toContain(CUSTOMER);
    // The dead letters too (the redriven request's key and body hold the number).
    await page.goto(`${base}/console/?dlq=${encodeURIComponent(`${suffix}-send-requests-dlq`)}`);
    await page.waitForSelector('#records-title');
    expect(await page.textContent('body')).not.toContain(CUSTOMER);
    await page.close();
  });

  it('a read-only user reads the dead letters but has no redrive, and is refused one', async () => {
    const page = await signedIn(TEST_TOKENS.read, `/console/?dlq=${encodeURIComponent(`${suffix}-send-requests-dlq`)}`);
    await page.waitForSelector('#records-title');
    expect(await page.textContent('#who-name')).toContain('read only');
    expect(await page.textContent('.counts')).toContain('RELAY_INVALID_JSON');
    expect(await page.getByRole('button', { name: 'Dry run' }).count()).toBe(0);
    expect(await page.textContent('main')).toMatch(/A redrive needs a token of the operator role/);
    // What a user could try from the browser's console: the server refuses it.
    const status = await page.evaluate(`(async () => {
      const token = sessionStorage.getItem('msgbridge.trackerToken');
      const res = await fetch('/dlq/${suffix}-send-requests-dlq/redrive', { method: 'POST', headers: { authorization: 'Bearer ' + token, 'content-type': 'application/json' }, body: JSON.stringify({ dryRun: false }) });
      return res.status;
    })()`);
    expect(status).toBe(403);
    await page.close();
  });

  it("the customer's page is the conversation: what they wrote (a text, a button reply) and what was sent with its state, newest first; an SMS says accepted is final", async () => {
    // Found by the number in either form: one customer.
    for (const q of [CUSTOMER, CUSTOMER_AS_SENDER]) {
      const page = await signedIn(devToken, `/console/?q=${encodeURIComponent(q)}`);
      await page.waitForSelector('table tbody tr');
      // Newest first: the SMS, the button reply, our text (read), their first message (later tests of
      // the first browser add messages to this customer: found by what they say, in this order).
      const cells = await page.locator('tbody tr td:nth-child(2)').allTextContents();
      const at = (pattern: RegExp) => cells.findIndex((c) => pattern.test(c));
      const order = [
        at(/Your code is 4242/),
        at(/Button reply\s*Deliver today\s*payload deliver-today-42/),
        at(/Your order shipped/),
        at(/Hi! Where is my order\?/),
      ];
      expect(
        order.every((i) => i >= 0),
        cells.join(' | '),
      ).toBe(true);
      expect([...order].sort((a, b) => a - b)).toEqual(order);
      expect(await page.locator('tbody tr.inbound').count()).toBe(2);
      expect(await page.locator('tbody tr', { hasText: readMessageId }).locator('.badge').textContent()).toBe('read');
      expect(await page.locator('tbody tr', { hasText: smsMessageId }).locator('.badge').allTextContents()).toEqual([
        'accepted',
        'SMS · final',
      ]);
      expect(await page.locator('tbody tr.inbound').first().textContent()).toContain(CUSTOMER_AS_SENDER);
      expect(await page.textContent('tbody tr.inbound:last-child')).toContain('Ada');
      if (q === CUSTOMER) await shotEveryBrowser(page, 'conversation');
      await page.close();
    }
    // The SMS's own page says what accepted means there.
    const sms = await signedIn(devToken, `/console/?message=${encodeURIComponent(smsMessageId)}`);
    await sms.waitForSelector('.timeline');
    expect(await sms.textContent('.sms-meaning')).toMatch(
      /no delivery receipts for SMS, so accepted is the last state/,
    );
    expect(await sms.textContent('dd.channel')).toBe('SMS');
    expect(await sms.locator('.timeline .step-name').allTextContents()).toEqual(['accepted']);
    expect(await sms.textContent('#window-title + p')).toMatch(/An SMS has no 24-hour window/);
    await shotEveryBrowser(sms, 'sms-message');
    await sms.close();
  });

  it("the message page shows the request's text as it was sent", async () => {
    const page = await signedIn(devToken, `/console/?message=${encodeURIComponent(readMessageId)}`);
    await page.waitForSelector('#request-content');
    expect(await page.textContent('#request-title')).toBe('Request');
    expect(await page.textContent('#request-content .request-text')).toBe('Your order shipped');
    expect(await page.locator('section', { has: page.locator('#request-title') }).textContent()).toBe(
      'RequestTypetextTextYour order shipped',
    );
    // The failed template's page shows its name and parameters.
    await page.goto(`${base}/console/?message=${encodeURIComponent(failedMessageId)}`);
    await page.waitForSelector('#request-content');
    expect(await page.textContent('#request-content')).toContain('order_update');
    expect(await page.locator('#request-content .parameters li').allTextContents()).toEqual(['order: 42']);
    await page.close();
  });

  it('a request the provider rejected is found by its request id and shows its error, attempts and maybeSent', async () => {
    // A text of blanks: the relay's schema takes it, the provider refuses it (400, not retriable).
    const requestId = `${suffix}-rejected`;
    await produce(`${suffix}-send-requests`, [
      {
        key: CUSTOMER,
        value: JSON.stringify({
          requestId,
          businessId: 'biz_1',
          type: 'text',
          recipient: { channelType: 'whatsapp', id: CUSTOMER },
          message: { text: '   ' },
        }),
      },
    ]);
    const deadline = Date.now() + 45_000;
    for (;;) {
      const res = await fetch(`${base}/requests/${requestId}`, { headers: { authorization: `Bearer ${devToken}` } });
      if (res.status === 200) {
        expect(await res.json()).toMatchObject({
          requestId,
          outcome: 'rejected',
          attempts: 1,
          maybeSent: false,
          error: { code: 'ERROR_CODE_MESSAGE_TEXT_EMPTY' },
        });
        break;
      }
      if (Date.now() > deadline) throw new Error(`the rejected request was not found (last answer ${res.status})`);
      await new Promise((r) => setTimeout(r, 500));
    }
    const page = await signedIn(devToken, `/console/?q=${encodeURIComponent(requestId)}`);
    await page.waitForSelector('.error-card');
    expect(await page.textContent('h1')).toBe('Request rejected');
    expect(await page.textContent('.error-card')).toContain('ERROR_CODE_MESSAGE_TEXT_EMPTY');
    expect(await page.textContent('.error-card')).toContain('400');
    expect(await page.locator('#trace-id').textContent()).toMatch(/\S+/);
    expect(await page.textContent('.send-summary')).toBe('1 attempt');
    expect(await page.textContent('.maybe-sent')).toMatch(/^no: /);
    expect(await page.textContent('main')).toContain('No message was created');
    expect(await page.textContent('#request-content .request-text')).toBe('   ');
    expect(await page.textContent('#request-content')).toContain('3 blank characters, nothing else');
    await shot(page, 'rejected');
    // The search box leads there too.
    await page.goto(`${base}/console/`);
    await page.fill('#q', requestId);
    await page.press('#q', 'Enter');
    await page.waitForSelector('.error-card');
    expect(new URL(page.url()).searchParams.get('q')).toBe(requestId);
    // So does the customer's phone number: its page lists the requests that did not become a message.
    await page.goto(`${base}/console/?q=${encodeURIComponent(CUSTOMER)}`);
    await page.waitForSelector('#requests-title');
    const row = page.locator('section.requests tbody tr', { hasText: requestId });
    expect(await row.textContent()).toContain('ERROR_CODE_MESSAGE_TEXT_EMPTY');
    await row.getByRole('link', { name: requestId }).click();
    await page.waitForSelector('.error-card');
    expect(await page.textContent('h1')).toBe('Request rejected');
    await page.close();
    // A read-only user sees the same page with the number masked.
    const reader = await signedIn(TEST_TOKENS.read, `/console/?q=${encodeURIComponent(requestId)}`);
    await reader.waitForSelector('.error-card');
    expect(await reader.textContent('main')).toContain(`${CUSTOMER.slice(0, 5)}•••${CUSTOMER.slice(-4)}`);
    expect(await reader.textContent('body')).not.toContain(CUSTOMER);
    await reader.close();
  });

  // The redrive sends its dead letter once per process: one browser does it.
  it.skipIf(name !== 'Chromium')(
    'an operator runs the dry run, then the redrive: the request goes back once and is sent; no later redrive produces it again',
    async () => {
      const page = await signedIn(devToken, `/console/?dlq=${encodeURIComponent(`${suffix}-send-requests-dlq`)}`);
      await page.waitForSelector('#records-title');
      await page.getByRole('button', { name: 'Dry run' }).click();
      await page.waitForSelector('text=Dry run: nothing written');
      await page.waitForSelector('.counts');
      expect(await page.textContent('main')).toMatch(/Would fail again: 1 \(RELAY_INVALID_JSON 1\)/);
      expect(await page.textContent('main')).toMatch(/Would produce 1 of 2 selected records: 1 → .*-send-requests\./);
      await shot(page, 'dead-letters');
      // Confirmed: the request goes back to send-requests once, and the sender sends it.
      await page.getByRole('button', { name: /^Redrive 1 record to / }).click();
      await page.waitForSelector('h3:text("Done")');
      expect(await page.textContent('main')).toMatch(/Produced 1 of 2 selected records/);
      const deadline = Date.now() + 45_000;
      for (;;) {
        const res = await fetch(`${base}/requests/${suffix}-redriven`, {
          headers: { authorization: `Bearer ${devToken}` },
        });
        if (res.status === 200) break;
        if (Date.now() > deadline) throw new Error(`the redriven request was not sent (last answer ${res.status})`);
        await new Promise((r) => setTimeout(r, 500));
      }
      // The same selection again resumes past it; another selection (another redrive name, read
      // from the start) finds it in the topic's ledger. Either way: nothing to produce.
      await page.getByRole('button', { name: 'Dry run' }).click();
      await page.waitForSelector('text=(resumes where it stopped)');
      expect(await page.textContent('main')).toContain('Nothing to produce.');
      await page.goto(
        `${base}/console/?dlq=${encodeURIComponent(`${suffix}-send-requests-dlq`)}&code=RELAY_UNKNOWN_BUSINESS`,
      );
      await page.getByRole('button', { name: 'Dry run' }).click();
      await page.waitForSelector('text=Already redriven, skipped: 1');
      expect(await page.textContent('main')).toContain('Nothing to produce.');
      await page.close();
    },
  );
});
