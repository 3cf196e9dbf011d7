import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';
import puppeteer, { type ElementHandle, type Page as PuppeteerPage } from 'puppeteer-core';
import { browserPath, TOOLS as PREREQUISITES, type Tool } from '../../scripts/prerequisites-plan.mjs';

/**
 * The browsers of the console's tests, both Debian's and never a downloaded one: Chromium
 * (`apt-get install chromium`) driven by playwright-core, and Firefox ESR (`apt-get install
 * firefox-esr`) driven by puppeteer-core over WebDriver BiDi (Playwright's Firefox needs
 * Playwright's own patched builds; a stock Firefox speaks WebDriver BiDi). A scenario is written
 * once against TestPage, the part of Playwright's Page the tests use: in Chromium it is
 * Playwright's Page itself; in Firefox a puppeteer page behind the same methods, with
 * Playwright's meaning (auto-waiting, visible elements for waitForSelector, strict single-element
 * locator actions, case-insensitive substring text and accessible-name matching).
 */
export const BROWSERS = ['Chromium', 'Firefox'] as const;
export type BrowserName = (typeof BROWSERS)[number];

// Where `npm test`'s prerequisite check looks, and installs them when missing (scripts/prerequisites.mjs).
const TOOLS: Record<BrowserName, Tool> = { Chromium: PREREQUISITES.chromium, Firefox: PREREQUISITES.firefox };
/** The one locale the Firefox pages get (a preference of the profile: BiDi has no per-page locale in puppeteer). */
const FIREFOX_LOCALE = 'en-US';

export interface NewPageOptions {
  viewport: { width: number; height: number };
  locale: string;
  timezoneId: string;
}

export interface TestResponse {
  url(): string;
  status(): number;
}

/** As Playwright's: elements with this text somewhere inside, or with an element the inner locator finds inside. */
export interface LocatorOptions {
  hasText?: string | RegExp;
  has?: TestLocator;
}

export interface TestLocator {
  locator(selector: string, options?: LocatorOptions): TestLocator;
  getByRole(role: 'link' | 'button', options?: { name?: string | RegExp; exact?: boolean }): TestLocator;
  first(): TestLocator;
  count(): Promise<number>;
  textContent(): Promise<string | null>;
  allTextContents(): Promise<string[]>;
  getAttribute(name: string): Promise<string | null>;
  click(): Promise<void>;
}

export interface TestPage {
  goto(url: string): Promise<unknown>;
  url(): string;
  waitForSelector(selector: string): Promise<unknown>;
  fill(selector: string, value: string): Promise<void>;
  press(selector: string, key: string): Promise<void>;
  textContent(selector: string): Promise<string | null>;
  locator(selector: string, options?: LocatorOptions): TestLocator;
  getByRole(role: 'link' | 'button', options?: { name?: string | RegExp; exact?: boolean }): TestLocator;
  /** A JavaScript expression (the test files have no DOM types); a promise is awaited. */
  evaluate(expression: string): Promise<unknown>;
  keyboard: { type(text: string): Promise<void>; press(key: string): Promise<void> };
  setViewportSize(size: { width: number; height: number }): Promise<void>;
  screenshot(options: { path: string; fullPage: boolean }): Promise<unknown>;
  on(event: 'pageerror', listener: (error: Error) => void): unknown;
  on(event: 'response', listener: (response: TestResponse) => void): unknown;
  close(): Promise<void>;
}

export interface TestBrowser {
  name: BrowserName;
  /** As the browser reports it, e.g. 156.0.8078.108 or firefox/153.7.0. */
  version: string;
  /** A page in a context of its own (nothing shared with another page). */
  newPage(options: NewPageOptions): Promise<TestPage>;
  close(): Promise<void>;
}

/** Launches the distribution's binary of the browser; a missing one fails (it is never skipped nor downloaded). */
export async function launchBrowser(name: BrowserName): Promise<TestBrowser> {
  const path = browserPath(TOOLS[name], process.env, existsSync);
  if (!existsSync(path))
    throw new Error(`no ${name} at ${path}: \`npm test\` installs it (apt-get install ${TOOLS[name].apt.debian})`);
  return name === 'Chromium' ? launchChromium(path) : launchFirefox(path);
}

async function launchChromium(executablePath: string): Promise<TestBrowser> {
  const browser = await chromium.launch({
    executablePath,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  return {
    name: 'Chromium',
    version: browser.version(),
    // Playwright's Page is the TestPage.
    newPage: (options) => browser.newPage(options),
    close: () => browser.close(),
  };
}

async function launchFirefox(executablePath: string): Promise<TestBrowser> {
  const browser = await puppeteer.launch({
    browser: 'firefox',
    executablePath,
    headless: true,
    timeout: 90_000,
    extraPrefsFirefox: { 'intl.locale.requested': FIREFOX_LOCALE, 'intl.accept_languages': FIREFOX_LOCALE },
  });
  return {
    name: 'Firefox',
    version: await browser.version(),
    newPage: async (options) => {
      if (options.locale !== FIREFOX_LOCALE)
        throw new Error(`the Firefox pages have the locale ${FIREFOX_LOCALE}, not ${options.locale}`);
      const context = await browser.createBrowserContext();
      const page = await context.newPage();
      await page.setViewport(options.viewport);
      await page.emulateTimezone(options.timezoneId);
      return new FirefoxPage(page, () => context.close());
    },
    close: () => browser.close(),
  };
}

// ---- Playwright's selectors and locators, in Firefox ----

type TextMatch = { text: string; exact?: boolean } | { regexp: { source: string; flags: string } };
type Step =
  { css: string; hasText?: TextMatch; has?: Step[] } | { role: 'link' | 'button'; name?: TextMatch } | { nth: number };

const textMatch = (m: string | RegExp, exact = false): TextMatch =>
  typeof m === 'string' ? { text: m, exact } : { regexp: { source: m.source, flags: m.flags } };

/**
 * In the page: the elements a chain of steps finds from the document. Text and names match as
 * Playwright's do (whitespace collapsed; a string is a case-insensitive substring, or with exact
 * the whole case-sensitive text); a role finds the elements of that implicit or explicit role
 * that are not hidden, by accessible name (aria-labelledby, aria-label, an input's value, the
 * text, the title: what the console uses); `has` keeps the elements inside which its own steps
 * find something.
 */
const RESOLVE = `(steps) => {
  const norm = (s) => (s ?? '').replace(/\\s+/g, ' ').trim();
  const matches = (text, m) => {
    if ('regexp' in m) return new RegExp(m.regexp.source, m.regexp.flags).test(text);
    return m.exact ? text === norm(m.text) : text.toLowerCase().includes(norm(m.text).toLowerCase());
  };
  const ROLES = {
    link: 'a[href], area[href], [role="link"]',
    button: 'button, input[type="button"], input[type="submit"], input[type="reset"], [role="button"]',
  };
  const hidden = (el) => el.closest('[aria-hidden="true"]') !== null || !el.checkVisibility({ visibilityProperty: true });
  const accessibleName = (el) => {
    const by = el.getAttribute('aria-labelledby');
    if (by) return norm(by.split(/\\s+/).map((id) => document.getElementById(id)?.textContent ?? '').join(' '));
    const label = norm(el.getAttribute('aria-label'));
    if (label) return label;
    if (el instanceof HTMLInputElement) return norm(el.value);
    return norm(el.textContent) || norm(el.getAttribute('title'));
  };
  const resolve = (steps, start) => {
    let scope = start;
    for (const step of steps) {
      if ('nth' in step) {
        scope = scope.slice(step.nth, step.nth + 1);
        continue;
      }
      const found = [];
      for (const root of scope) {
        for (const el of root.querySelectorAll('css' in step ? step.css : ROLES[step.role])) {
          if (found.includes(el)) continue;
          if ('css' in step && step.hasText && !matches(norm(el.textContent), step.hasText)) continue;
          if ('css' in step && step.has && resolve(step.has, [el]).length === 0) continue;
          if ('role' in step) {
            const explicit = el.getAttribute('role');
            if ((explicit && explicit !== step.role) || hidden(el)) continue;
            if (step.name && !matches(accessibleName(el), step.name)) continue;
          }
          found.push(el);
        }
      }
      scope = found;
    }
    return scope;
  };
  return resolve(steps, [document]);
}`;

const found = (steps: Step[]) => `(${RESOLVE})(${JSON.stringify(steps)})`;

/** A selector that is CSS, not one of Playwright's own engines. */
function css(selector: string): string {
  if (/^[a-z-]+=|>>|:(has-)?text\(|:visible|:nth-match\(/.test(selector))
    throw new Error(`the Firefox pages take CSS here, not ${selector}`);
  return selector;
}

/**
 * For puppeteer's own waits: Playwright's text selectors as puppeteer's, `text=Done` and
 * `h3:text("Done")` (a substring of the text; puppeteer's is case-sensitive), or CSS.
 */
function puppeteerSelector(selector: string): string {
  const text = /^text=(.+)$/.exec(selector);
  if (text) return `::-p-text(${JSON.stringify(text[1])})`;
  const scoped = /^([^:]*):text\("(.+)"\)$/.exec(selector);
  if (scoped) return `${scoped[1]}::-p-text(${JSON.stringify(scoped[2])})`;
  return css(selector);
}

class FirefoxLocator implements TestLocator {
  constructor(
    private readonly page: PuppeteerPage,
    readonly steps: Step[],
  ) {}

  locator(selector: string, options?: LocatorOptions): TestLocator {
    const step: Step = { css: css(selector) };
    if (options?.hasText !== undefined) step.hasText = textMatch(options.hasText);
    if (options?.has !== undefined) {
      if (!(options.has instanceof FirefoxLocator)) throw new Error('has: takes a locator of the same page');
      step.has = options.has.steps;
    }
    return new FirefoxLocator(this.page, [...this.steps, step]);
  }

  getByRole(role: 'link' | 'button', options?: { name?: string | RegExp; exact?: boolean }): TestLocator {
    return new FirefoxLocator(this.page, [
      ...this.steps,
      { role, ...(options?.name !== undefined ? { name: textMatch(options.name, options.exact) } : {}) },
    ]);
  }

  first(): TestLocator {
    return new FirefoxLocator(this.page, [...this.steps, { nth: 0 }]);
  }

  async count(): Promise<number> {
    return (await this.page.evaluate(`${found(this.steps)}.length`)) as number;
  }

  async allTextContents(): Promise<string[]> {
    return (await this.page.evaluate(`${found(this.steps)}.map((el) => el.textContent ?? '')`)) as string[];
  }

  async textContent(): Promise<string | null> {
    return this.one((el) => el.evaluate((e) => e.textContent));
  }

  async getAttribute(name: string): Promise<string | null> {
    return this.one((el) => el.evaluate((e, n) => e.getAttribute(n), name));
  }

  async click(): Promise<void> {
    await this.one((el) => el.click());
  }

  /** As Playwright's single-element actions: waits for the element, and more than one is an error. */
  private async one<T>(action: (el: ElementHandle) => Promise<T>): Promise<T> {
    // The element, or (a throw in the page would not end the wait) how many there are.
    const expression = `(() => {
      const els = ${found(this.steps)};
      return els.length > 1 ? els.length : els[0];
    })()`;
    const handle = await this.page.waitForFunction(expression, { polling: 'mutation' });
    try {
      const el = handle.asElement();
      if (!el)
        throw new Error(
          `strict mode violation: ${String(await handle.jsonValue())} elements match ${JSON.stringify(this.steps)}`,
        );
      return await action(el as ElementHandle);
    } finally {
      await handle.dispose();
    }
  }
}

class FirefoxPage implements TestPage {
  readonly keyboard: TestPage['keyboard'];

  constructor(
    private readonly page: PuppeteerPage,
    private readonly closeContext: () => Promise<void>,
  ) {
    this.keyboard = { type: (text) => page.keyboard.type(text), press: (key) => page.keyboard.press(key as never) };
  }

  goto(url: string): Promise<unknown> {
    return this.page.goto(url);
  }

  url(): string {
    return this.page.url();
  }

  /** Playwright's default: until the element is there and visible. */
  waitForSelector(selector: string): Promise<unknown> {
    return this.page.waitForSelector(puppeteerSelector(selector), { visible: true });
  }

  async fill(selector: string, value: string): Promise<void> {
    await this.page.locator(puppeteerSelector(selector)).fill(value);
  }

  async press(selector: string, key: string): Promise<void> {
    const el = await this.page.waitForSelector(puppeteerSelector(selector));
    await el!.press(key as never);
  }

  /** The first match's text, once there is one (not strict, as Playwright's page.textContent). */
  textContent(selector: string): Promise<string | null> {
    return new FirefoxLocator(this.page, []).locator(selector).first().textContent();
  }

  locator(selector: string, options?: LocatorOptions): TestLocator {
    return new FirefoxLocator(this.page, []).locator(selector, options);
  }

  getByRole(role: 'link' | 'button', options?: { name?: string | RegExp; exact?: boolean }): TestLocator {
    return new FirefoxLocator(this.page, []).getByRole(role, options);
  }

  evaluate(expression: string): Promise<unknown> {
    return this.page.evaluate(expression);
  }

  setViewportSize(size: { width: number; height: number }): Promise<void> {
    return this.page.setViewport(size);
  }

  screenshot(options: { path: string; fullPage: boolean }): Promise<unknown> {
    return this.page.screenshot({ path: options.path as `${string}.png`, fullPage: options.fullPage });
  }

  on(event: 'pageerror', listener: (error: Error) => void): unknown;
  on(event: 'response', listener: (response: TestResponse) => void): unknown;
  on(
    event: 'pageerror' | 'response',
    listener: ((error: Error) => void) | ((response: TestResponse) => void),
  ): unknown {
    if (event === 'pageerror')
      return this.page.on('pageerror', (error) => (listener as (error: Error) => void)(error as Error));
    // As Playwright's: no event for a data: URL (Firefox loads the console's `data:,` icon; nothing reaches a server).
    return this.page.on('response', (response) => {
      if (!response.url().startsWith('data:')) (listener as (response: TestResponse) => void)(response);
    });
  }

  async close(): Promise<void> {
    await this.page.close();
    await this.closeContext();
  }
}
