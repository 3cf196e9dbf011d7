import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeRecords, kafkaBrokers, uniqueTopic } from '../helpers/kafka.js';
import { runCli, startCli } from '../helpers/cli.js';

// The whole loop through real processes: `msgbridge dev` (simulator, ingress, sender on the
// suite's Kafka), `msgbridge simulator inbound`, `msgbridge send`, `msgbridge tail`, `webhooks`.
const suffix = uniqueTopic('dev');
const env: Record<string, string> = {
  KAFKA_BROKERS: '',
  MSGBRIDGE_INGRESS_PORT: '0',
  MSGBRIDGE_INGRESS_ADMIN_PORT: '0',
  MSGBRIDGE_SIMULATOR_PORT: '0',
  MSGBRIDGE_SENDER_ADMIN_PORT: '0',
  MSGBRIDGE__sender__groupId: `${suffix}-sender`,
  MSGBRIDGE__localKafka__cacheDir: JSON.stringify(mkdtempSync(join(tmpdir(), 'msgbridge-dev-'))),
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
  MSGBRIDGE__tracker__groupId: `${suffix}-tracker`,
  MSGBRIDGE__tracker__transactionalIdPrefix: `${suffix}-tracker`,
};

describe('msgbridge dev, end to end', () => {
  let dev: ReturnType<typeof startCli>;
  let simulatorUrl: string;
  let ingressUrl: string;

  beforeAll(async () => {
    env.KAFKA_BROKERS = kafkaBrokers().join(',');
    // A proxy in the developer's shell (here one nothing listens on) must not carry the calls to dev's own simulator.
    dev = startCli(['dev', '--summary-interval', '1'], { ...env, HTTP_PROXY: 'http://127.0.0.1:9' });
    simulatorUrl = (await dev.waitFor(/simulator\s+(http:\/\/\S+)/))[1]!;
    ingressUrl = (await dev.waitFor(/ingress\s+(http:\/\/\S+?)\/webhooks/))[1]!;
    // The screen reaches this pipe in several reads: the tests below read it whole, up to its last line.
    await dev.waitFor(/The operator commands find this Kafka/);
  });

  afterAll(async () => {
    const code = await dev?.stop('SIGINT');
    expect(code).toBe(0);
    expect(dev.output().stdout).toMatch(/stopped\.\n$/);
  });

  it('a healthy start logs no warning and no error (fresh topics: leader elections, coordinators loading)', () => {
    const noisy = dev
      .output()
      .stderr.split('\n')
      .filter((l) => /"level":(40|50|60)/.test(l));
    expect(noisy, noisy.join('\n')).toEqual([]);
  });

  it('prints what runs where and how to try it', () => {
    const { stdout } = dev.output();
    expect(stdout).toMatch(/Kafka\s+127\.0\.0\.1:\d+\s+\(KAFKA_BROKERS\)/);
    expect(stdout).toContain('msgbridge send text');
    expect(stdout).toContain('businesses  biz_1');
    expect(stdout).toMatch(/tracker\s+\S+send-results \+ \S+delivery_status → \S+message-state/);
  });

  it('prints a console link with a dev operator token in its fragment: the token opens the queries, nothing else does', async () => {
    const m = /console\s+(http:\/\/\S+)\/console\/#token=([A-Za-z0-9_-]{20,})/.exec(dev.output().stdout);
    expect(m, dev.output().stdout).not.toBeNull();
    const [, base, token] = m!;
    expect((await fetch(`${base}/console/`)).headers.get('content-type')).toMatch(/^text\/html/);
    const me = await fetch(`${base}/me`, { headers: { authorization: `Bearer ${token}` } });
    expect(await me.json()).toMatchObject({ name: 'dev', role: 'operator', dlq: true });
    expect((await fetch(`${base}/messages/any`)).status).toBe(401);
    expect((await fetch(`${base}/messages/any`, { headers: { authorization: 'Bearer not-the-token' } })).status).toBe(
      401,
    );
  });

  it('a text to a customer who wrote first: accepted → sent, delivered, read, having travelled simulator → ingress → Kafka', async () => {
    const inbound = await runCli(
      ['simulator', 'inbound', '--business', 'biz_1', '--from', '+15550002222', '--text', 'hi', '--url', simulatorUrl],
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
        '+15550002222',
        '--text',
        'Your order shipped',
        '--timeout',
        '45',
      ],
      env,
      90_000,
    );
    expect(sent.code, `${sent.stdout}\n${sent.stderr}`).toBe(0);
    const messageId = /accepted: message id (\S+)/.exec(sent.stdout)?.[1];
    expect(messageId).toMatch(/^[0-9A-HJKMNP-TV-Z]{26}$/);
    const statuses = [...sent.stdout.matchAll(/^\+[\d.]+s (sent|delivered|read)$/gm)].map((m) => m[1]);
    // Followed on message-state (the tracker runs in dev): each status once, in order.
    expect(sent.stdout).toMatch(/following \S+message-state \(the tracker's one state per message\)/);
    expect(statuses).toEqual(['sent', 'delivered', 'read']);

    // Those statuses are records the ingress wrote: keyed by the message id, with its headers.
    const records = await consumeRecords(env.MSGBRIDGE__kafka__topics__deliveryStatus!, 3);
    const mine = records.filter((r) => r.key === messageId);
    expect(mine.map((r) => JSON.parse(r.value.toString()).statusUpdate.status).sort()).toEqual([
      'delivered',
      'read',
      'sent',
    ]);
    for (const r of mine) expect(r.headers).toMatchObject({ 'business-id': 'biz_1', schema: 'delivery_status/v1' });
    // Correlation: the send result is keyed by the same message id (co-partitioned with the statuses).
    const results = await consumeRecords(env.MSGBRIDGE__kafka__topics__sendResults!, 1);
    const result = results.find((r) => JSON.parse(r.value.toString()).messageId === messageId)!;
    expect(result.key).toBe(messageId);
    expect(JSON.parse(result.value.toString())).toMatchObject({
      outcome: 'accepted',
      businessId: 'biz_1',
      recipient: '+15550002222',
    });
    expect(result.headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    // And the customer's message reached the messages topic the same way.
    const inboundRecords = await consumeRecords(env.MSGBRIDGE__kafka__topics__messages!, 1);
    expect(inboundRecords[0]!.key).toBe('15550002222');

    // The tracker folded result and statuses into one state: `msgbridge status` by either id.
    let status = await runCli(['status', messageId!], env);
    for (let i = 0; i < 40 && !/"status": "read"/.test(status.stdout); i++) {
      await new Promise((r) => setTimeout(r, 500));
      status = await runCli(['status', messageId!], env);
    }
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({
      messageId,
      status: 'read',
      businessId: 'biz_1',
      recipient: '+15550002222',
      events: 4,
    });
    const requestId = JSON.parse(result.value.toString()).requestId as string;
    const byRequest = await runCli(['status', requestId], env);
    expect(JSON.parse(byRequest.stdout)).toMatchObject({ messageId, requestId });
    const unknown = await runCli(['status', 'no-such-message'], env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no state for no-such-message/);
  });

  it('a text with no open conversation window is rejected at once without a provider call; with a fallback template, the template goes out', async () => {
    const rejected = await runCli(
      ['send', 'text', '--to', '+15550007777', '--text', 'unsolicited', '--timeout', '45'],
      env,
      90_000,
    );
    expect(rejected.code, rejected.stdout).toBe(1);
    expect(rejected.stdout).toMatch(
      /rejected without a send \(outside the conversation window\): RELAY_OUTSIDE_CONVERSATION_WINDOW/,
    );
    const sends = (await (await fetch(`${simulatorUrl}/sim/sends`)).json()) as {
      to?: string;
      number?: string;
      recipient?: { id?: string };
    }[];
    expect(JSON.stringify(sends)).not.toContain('+15550007777');

    const fallback = await runCli(
      [
        'send',
        'text',
        '--to',
        '+15550007777',
        '--text',
        'unsolicited',
        '--fallback-template',
        'order_update',
        '-p',
        'order=42',
        '--timeout',
        '45',
      ],
      env,
      90_000,
    );
    expect(fallback.stdout).toMatch(
      /accepted as the fallback template order_update \(the conversation window is closed\): message id/,
    );
    expect(fallback.code, fallback.stdout).toBe(0);
  });

  it('a template with the wrong parameters ends in delivery_failed with the template error', async () => {
    const sent = await runCli(
      [
        'send',
        'template',
        '--to',
        '+15550008888',
        '--template',
        'order_update',
        '--param',
        'wrong=1',
        '--timeout',
        '45',
      ],
      env,
      90_000,
    );
    expect(sent.code, sent.stdout).toBe(1);
    expect(sent.stdout).toMatch(/delivery_failed: ERROR_CODE_MESSAGE_TEMPLATE_INPUT_INVALID/);
  });

  it('tail pretty-prints the records of a topic with key, headers and decoded value', async () => {
    const tail = await runCli(
      ['tail', env.MSGBRIDGE__kafka__topics__messages!, '--from-beginning', '--max', '1', '--json', '--timeout', '30'],
      env,
    );
    expect(tail.code, tail.stderr).toBe(0);
    const record = JSON.parse(tail.stdout.trim().split('\n')[0]!);
    expect(record.key).toBe('15550002222');
    expect(record.headers['business-id']).toBe('biz_1');
    expect(record.value.message.text).toBe('hi');
  });

  it('webhooks list shows the ingress addresses dev registered; register is idempotent', async () => {
    const providerEnv = {
      ...env,
      MSGBRIDGE_BUSINESS_ID: 'biz_1',
      MSGBRIDGE_API_KEY: 'dev-api-key',
      MSGBRIDGE_PROVIDER_URL: simulatorUrl,
    };
    const list = await runCli(['webhooks', 'list'], providerEnv);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toContain(`biz_1 messages ${ingressUrl}/webhooks/biz_1/messages`);
    expect(list.stdout).toContain(`biz_1 delivery_status ${ingressUrl}/webhooks/biz_1/delivery_status`);
    const again = await runCli(['webhooks', 'register', '--address-base', ingressUrl], providerEnv);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout.match(/already registered/g)).toHaveLength(2);
  });

  it('one customer in both forms, SMS and a button reply, end to end (sender.conversationWindow "reject")', async () => {
    const [, base, token] = /console\s+(http:\/\/\S+)\/console\/#token=(\S+)/.exec(dev.output().stdout)!;
    const query = async (path: string) => {
      const res = await fetch(`${base}${path}`, { headers: { authorization: `Bearer ${token}` } });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const sends = async () =>
      (await (await fetch(`${simulatorUrl}/sim/sends`)).json()) as {
        operation: string;
        messageId: string | null;
        body: { recipient?: { id: string; channelType: string } };
      }[];
    // The customer writes as the provider writes inbound senders (no +): a text to +1555… goes through.
    const WROTE = '15550003131';
    const inbound = await runCli(
      ['simulator', 'inbound', '--business', 'biz_1', '--from', WROTE, '--text', 'hello', '--url', simulatorUrl],
      env,
    );
    expect(inbound.code, inbound.stderr).toBe(0);
    const text = await runCli(
      ['send', 'text', '--to', `+${WROTE}`, '--text', 'Hello back', '--timeout', '45'],
      env,
      90_000,
    );
    expect(text.code, text.stdout).toBe(0);
    const textId = /accepted: message id (\S+)/.exec(text.stdout)![1]!;
    // GET /messages?recipient= finds it by either form.
    for (const form of [WROTE, encodeURIComponent(`+${WROTE}`)]) {
      const page = await query(`/messages?recipient=${form}`);
      expect(
        (page.body.messages as { messageId: string }[]).map((m) => m.messageId),
        form,
      ).toEqual([textId]);
    }

    // An SMS to a customer who never wrote is sent; no status follows, ever: accepted is where it ends.
    const SILENT = '+15550003232';
    const sms = await runCli(
      ['send', 'text', '--channel', 'sms', '--to', SILENT, '--text', 'Your code is 1234', '--timeout', '45'],
      env,
      90_000,
    );
    expect(sms.code, sms.stdout).toBe(0);
    expect(sms.stdout).toMatch(/SMS: handed to the SMS network/);
    const smsId = /accepted: message id (\S+)/.exec(sms.stdout)![1]!;
    expect((await sends()).filter((s) => s.body.recipient?.id === SILENT)).toEqual([
      expect.objectContaining({
        operation: 'text',
        messageId: smsId,
        body: expect.objectContaining({ recipient: { channelType: 'sms', id: SILENT } }),
      }),
    ]);
    // A WhatsApp text to the same customer is still refused without a provider call.
    const refused = await runCli(
      ['send', 'text', '--to', SILENT, '--text', 'Are you there?', '--timeout', '45'],
      env,
      90_000,
    );
    expect(refused.code, refused.stdout).toBe(1);
    expect(refused.stdout).toMatch(/RELAY_OUTSIDE_CONVERSATION_WINDOW/);
    expect((await sends()).filter((s) => s.body.recipient?.id === SILENT)).toHaveLength(1);
    // The tracker says the SMS is accepted on the SMS channel, and nothing moves it: the simulator sends no status for
    // it.
    await new Promise((r) => setTimeout(r, 2000));
    expect(await query(`/messages/${smsId}`)).toMatchObject({
      status: 200,
      body: { status: 'accepted', events: 1, sentAt: null, send: { channel: 'sms' } },
    });

    // A button reply travels the ingress and the tracker like a text: it is in the customer's conversation.
    const button = await runCli(
      [
        'simulator',
        'inbound',
        '--business',
        'biz_1',
        '--from',
        WROTE,
        '--text',
        'Yes',
        '--button',
        'confirm-42',
        '--url',
        simulatorUrl,
      ],
      env,
    );
    expect(button.code, button.stderr).toBe(0);
    let thread: { items: { direction: string; inbound?: { text: string; button: unknown } }[] } = { items: [] };
    for (let i = 0; i < 60 && thread.items.filter((item) => item.direction === 'inbound').length < 2; i++) {
      await new Promise((r) => setTimeout(r, 500));
      thread = (await query(`/thread?customer=%2B${WROTE}`)).body as typeof thread;
    }
    expect(thread.items.map((item) => (item.direction === 'inbound' ? `in:${item.inbound!.text}` : 'out'))).toEqual([
      'in:Yes',
      'out',
      'in:hello',
    ]);
    expect(thread.items[0]!.inbound!.button).toEqual({ payload: 'confirm-42' });
  });
});
