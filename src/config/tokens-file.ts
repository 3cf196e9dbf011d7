import { readFileSync } from 'node:fs';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { accessTokensFileSchema, type AccessTokenConfig } from './schema.js';

/**
 * The tracker's tokens file (`tracker.accessTokensFile`, MSGBRIDGE_TRACKER_TOKENS_FILE): a JSON
 * array of `{ name, role, sha256 }` (src/tracker/README.md, "Console and access"), watched like the businesses file
 * (its watchValidatedFile). Errors name the file, the entry and the field, never a value.
 */
export function readTokensFile(path: string): AccessTokenConfig[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new MsgbridgeError('CONFIG_FILE_UNREADABLE', `cannot read the tokens file ${path}: ${errorMessage(err)}`, {
      cause: err,
    });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new MsgbridgeError('CONFIG_INVALID', `the tokens file ${path} is not valid JSON: ${errorMessage(err)}`, {
      cause: err,
    });
  }
  const parsed = accessTokensFileSchema.safeParse(json);
  if (!parsed.success) {
    const lines = parsed.error.issues.map(
      (i) => `  - ${i.path.length > 0 ? `entry ${i.path.map(String).join('.')}` : '(root)'}: ${i.message}`,
    );
    throw new MsgbridgeError(
      'CONFIG_INVALID',
      `invalid tokens file ${path} (expected a JSON array of { "name", "role": "read" | "operator", "sha256" }):\n${lines.join('\n')}`,
    );
  }
  return parsed.data;
}
