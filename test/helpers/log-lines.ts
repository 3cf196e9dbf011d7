/**
 * Keys that appear twice in one object of a JSON text (JSON.parse keeps the last silently; log
 * pipelines keep one or reject the line). A small scanner: strings (with escapes) are skipped
 * whole, objects and arrays tracked by depth. Undefined when the text is not a JSON object line.
 */
export function repeatedKeys(text: string): string[] | undefined {
  const line = text.trim();
  if (!line.startsWith('{')) return undefined;
  const repeated: string[] = [];
  const stack: { keys: Set<string> | undefined; expectKey: boolean }[] = [];
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === '"') {
      let j = i + 1;
      while (j < line.length && line[j] !== '"') j += line[j] === '\\' ? 2 : 1;
      const top = stack.at(-1);
      if (top?.keys && top.expectKey) {
        const key = JSON.parse(line.slice(i, j + 1)) as string;
        if (top.keys.has(key)) repeated.push(key);
        top.keys.add(key);
        top.expectKey = false;
      }
      i = j;
    } else if (c === '{') stack.push({ keys: new Set(), expectKey: true });
    else if (c === '[') stack.push({ keys: undefined, expectKey: false });
    else if (c === '}' || c === ']') stack.pop();
    else if (c === ',' && stack.at(-1)?.keys) stack.at(-1)!.expectKey = true;
  }
  return repeated;
}

/** Throws naming the first log line of `output` that carries a key twice. */
export function assertUniqueLogKeys(output: string): void {
  for (const line of output.split('\n')) {
    const repeated = repeatedKeys(line);
    if (repeated && repeated.length > 0)
      throw new Error(`a log line carries ${repeated.map((k) => `"${k}"`).join(', ')} twice: ${line.slice(0, 300)}`);
  }
}
