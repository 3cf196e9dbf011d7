import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HttpAnswer } from '../runtime/http-server.js';

/**
 * The console's static files (src/tracker/console/: one HTML page, one ES module, one style
 * sheet; `npm run build` copies them next to the compiled tracker), read once at start and
 * served from memory with a strict Content-Security-Policy. They hold no data: every datum is
 * fetched by the page with the caller's credential (README "Console and access").
 */
const CONSOLE_DIR = fileURLToPath(new URL('./console/', import.meta.url));

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/** Same origin only, no inline script or style, no framing, no form posts elsewhere. */
export const CONSOLE_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const SECURITY_HEADERS = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cross-origin-opener-policy': 'same-origin',
};

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

export class ConsoleAssets {
  private readonly assets = new Map<string, Asset>();

  constructor(dir = CONSOLE_DIR) {
    for (const name of readdirSync(dir)) {
      const type = TYPES[extname(name)];
      if (!type) continue;
      const body = readFileSync(join(dir, name));
      this.assets.set(name, {
        body,
        type,
        etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`,
      });
    }
    if (!this.assets.has('index.html'))
      throw new Error(`the console's files are missing from ${dir} (npm run build copies them)`);
  }

  /**
   * `/console/` and every address under it without a file extension is the page (its views are
   * chosen by the query: shareable addresses); files are revalidated by ETag, the page is never
   * cached (a new release shows at once).
   */
  answer(path: string, headers: Record<string, string | string[] | undefined>): HttpAnswer | undefined {
    if (path === '/console') return { status: 308, headers: { location: '/console/' }, raw: '' };
    if (!path.startsWith('/console/')) return undefined;
    const rest = path.slice('/console/'.length);
    const name = rest === '' || !rest.includes('.') ? 'index.html' : rest;
    if (name.includes('/')) return undefined;
    const asset = this.assets.get(name);
    if (!asset) return undefined;
    const common = {
      ...SECURITY_HEADERS,
      etag: asset.etag,
      'cache-control': name === 'index.html' ? 'no-cache' : 'public, max-age=300, must-revalidate',
    };
    if (headers['if-none-match'] === asset.etag) return { status: 304, headers: common, raw: '' };
    return { status: 200, headers: { ...common, 'content-type': asset.type }, raw: asset.body };
  }
}
