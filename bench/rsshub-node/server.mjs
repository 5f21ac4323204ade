// RSSHub as its users run it: its own Hono app (routes, memory cache, RSS/Atom templates) on its own
// HTTP server. The npm package ships only the library build (`dist-lib`, whose `init()`/`request()` answer
// JSON), so this does what RSSHub's `lib/index.ts` does, `serve({fetch: app.fetch, port})` from
// @hono/node-server, over the package's app module. Configuration is RSSHub's own, from the environment
// (PORT, NODE_ENV=production, CACHE_TYPE, DISCOURSE_CONFIG_{id}, ...), read when the app is imported.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { serve } from '@hono/node-server';

const dist = dirname(fileURLToPath(import.meta.resolve('rsshub')));
// pkg.mjs's init() imports the app module, whose file name carries a build hash: read it from there.
const chunk = readFileSync(join(dist, 'pkg.mjs'), 'utf8').match(/import\("\.\/(app-[\w-]+\.mjs)"\)/);
if (!chunk) throw new Error(`no app module named in ${join(dist, 'pkg.mjs')}`);
const { default: app } = await import(join(dist, chunk[1]));
const port = Number(process.env.PORT);
serve({ fetch: app.fetch, hostname: '127.0.0.1', port }, () => console.log(`RSSHub listening on 127.0.0.1:${port}`));
