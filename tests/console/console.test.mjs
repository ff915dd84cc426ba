// The web console in a real browser (issue #23, docs/console.md): Debian's headless Chromium,
// driven by puppeteer-core from the console's own npm packages, against `tessera dev` on
// loopback with its simulated GPUs (two dgx-h100 nodes, and an a100-8x whose GPUs 6 and 7 are in
// MIG mode). It logs in through the form, submits a workload from the console and sees it run on
// the GPU map and its log followed, sees a tenant token fail to reach another tenant's workload
// (the API answers 404, the console says so and shows nothing of it), sees a revoked token sent
// back to the login form with the reason, and, as the operator, sees MIG tiles sized by their
// profile and fractional shares sized by their milli-GPU on the fleet map.
//
// Environment (set by tests/CMakeLists.txt): TESSERA_BINARY_DIR (build/tessera), TESSERA_NODE_MODULES
// (puppeteer-core), TESSERA_CHROMIUM (default /usr/bin/chromium); TESSERA_SCREENSHOTS=DIR also
// writes the pages' screenshots there (docs/images/console-*.png are made that way).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';

const binaryDir = path.resolve(process.env.TESSERA_BINARY_DIR ?? 'build');
const nodeModules = path.resolve(process.env.TESSERA_NODE_MODULES ?? path.join(binaryDir, 'web', 'node_modules'));
const chromium = process.env.TESSERA_CHROMIUM ?? '/usr/bin/chromium';
const shots = process.env.TESSERA_SCREENSHOTS ?? '';

let dir, server, dev, browser, page;
const consoleErrors = [];

// One API call as a client would make it, trusting the dev server's CA only.
function api(token, method, p, body) {
  return new Promise((resolve, reject) => {
    const u = new URL(p, dev.address);
    const req = https.request(u, {
      method, ca: fs.readFileSync(dev.ca_cert),
      headers: { ...(token ? { 'X-Tessera-Token': token } : {}), ...(body ? { 'Content-Type': 'application/json' } : {}) },
    }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => {
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
    });
    req.on('error', reject);
    req.end(body ? JSON.stringify(body) : undefined);
  });
}

async function until(what, f, ms = 30000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = await f();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

async function shot(name) {
  if (!shots) return;
  fs.mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: false });
}

async function loginAs(token) {
  await page.goto(`${dev.address}/ui/`, { waitUntil: 'domcontentloaded' });
  await page.waitForSelector('#login-form');
  await page.type('#token', token);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#logout');
}

async function logoutNow() {
  await page.click('#logout');
  await page.waitForSelector('#login-form');
}

before(async () => {
  if (!fs.existsSync(chromium)) {
    throw new Error(`no Chromium at ${chromium}: install Debian's chromium (scripts/bootstrap), or set TESSERA_CHROMIUM`);
  }
  const require = createRequire(path.join(nodeModules, 'noop.js'));
  let puppeteer;
  try {
    puppeteer = require('puppeteer-core');
  } catch (e) {
    throw new Error(`puppeteer-core is not under ${nodeModules} (the build runs npm ci there): ${e.message}`);
  }
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-console-'));
  server = spawn(path.join(binaryDir, 'tessera'),
                 ['dev', '--data-dir', dir, '--addr', '127.0.0.1:0', '--nodes', 'dgx-h100:2,a100-8x:1'],
                 { stdio: ['ignore', 'ignore', fs.openSync(path.join(dir, 'server.log'), 'w')] });
  dev = await until('tessera dev to write dev.json', () => {
    const p = path.join(dir, 'dev.json');
    if (!fs.existsSync(p)) return null;
    const d = JSON.parse(fs.readFileSync(p, 'utf8'));
    return d.pid === server.pid ? d : null;
  });
  // Every node's agent registered: 24 GPUs, MIG mode on two.
  await until('the agents to register', async () => {
    const r = await api(dev.root_token, 'GET', '/v1/nodes');
    return r.json?.data?.nodes?.length === 3 && r.json.data.nodes.every((n) => n.state === 'ready');
  });
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    acceptInsecureCerts: true,  // The dev server's own CA; the API calls above check it.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  page = await browser.newPage();
  await page.setViewport({ width: 1440, height: 900 });
  page.setDefaultTimeout(30000);  // CI runs the other tests beside this one, on 2 cores.
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
});

after(async () => {
  await browser?.close();
  if (server && server.exitCode === null) {
    server.kill('SIGTERM');
    await new Promise((r) => server.once('exit', r));
  }
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('the console is served at /ui/ with a strict CSP, / redirects there, unknown files are 404', async () => {
  const root = await api('', 'GET', '/');
  assert.equal(root.status, 302);
  assert.equal(root.headers.location, '/ui/');
  const index = await api('', 'GET', '/ui/');
  assert.equal(index.status, 200);
  assert.match(index.headers['content-type'], /^text\/html/);
  const csp = index.headers['content-security-policy'];
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  assert.equal(index.headers['x-content-type-options'], 'nosniff');
  assert.equal(index.headers['cache-control'], 'no-cache');
  assert.doesNotMatch(index.text, /<script>/);  // No inline script: only <script src=...>.
  const js = index.text.match(/src="(app-[A-Z0-9]+\.js)"/)[1];
  const bundle = await api('', 'GET', `/ui/${js}`);
  assert.equal(bundle.status, 200);
  assert.match(bundle.headers['content-type'], /^text\/javascript/);
  assert.match(bundle.headers['cache-control'], /immutable/);
  const again = await new Promise((resolve) => {
    https.get(new URL('/ui/', dev.address), { ca: fs.readFileSync(dev.ca_cert), headers: { 'If-None-Match': index.headers.etag } },
              (res) => { res.resume(); resolve(res.statusCode); });
  });
  assert.equal(again, 304);
  assert.equal((await api('', 'GET', '/ui/nope.js')).status, 404);
  assert.equal((await api('', 'GET', '/ui/%2e%2e/dev.json')).status, 404);
  assert.equal((await api('', 'POST', '/ui/')).status, 405);
  // The static files need no token; the API still does.
  assert.equal((await api('', 'GET', '/v1/tenants/demo/workloads?list=true')).status, 403);
});

test('a bad token is refused at the login form; a tenant token logs in', async () => {
  await page.goto(`${dev.address}/ui/`, { waitUntil: 'domcontentloaded' });
  await page.waitForSelector('#login-form');
  await shot('console-login');
  await page.type('#token', 'tsr.notarealtokenatall00000');
  await page.click('#login-form button[type=submit]');
  const err = await page.waitForSelector('#login-error');
  assert.match(await err.evaluate((e) => e.textContent), /403/);
  await page.evaluate(() => { document.querySelector('#token').value = ''; });
  await page.$eval('#token', (e) => e.dispatchEvent(new Event('input', { bubbles: true })));
  await page.type('#token', dev.tenant_token);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#logout');
  assert.match(await page.$eval('.scope-badge', (e) => e.textContent), /tenant demo/);
  // Kept for this tab only: sessionStorage, never a cookie or localStorage.
  assert.equal(await page.evaluate(() => sessionStorage.getItem('tessera.token')), dev.tenant_token);
  assert.equal(await page.evaluate(() => localStorage.length), 0);
  assert.equal((await page.cookies()).length, 0);
});

test('a workload submitted from the console runs, shows on the GPU map, and its log is followed', async () => {
  await page.goto(`${dev.address}/ui/#/tenant/demo/submit`);
  await page.waitForSelector('#submit-form');
  await page.type('#f-name', 'console-train');
  await page.$eval('#f-command', (e) => { e.value = ''; });
  await page.type('#f-command', 'for i in 1 2 3 4 5 6 7 8 9; do echo hello from step $i; sleep 1; done; sleep 600');
  await page.click('#f-submit');
  await page.waitForFunction(() => location.hash === '#/tenant/demo/workloads/console-train');
  await page.waitForFunction(() => document.querySelector('#workload-phase')?.textContent === 'running', { timeout: 30000 });
  await page.waitForFunction(() => /hello from step 2/.test(document.querySelector('#logs')?.textContent ?? ''), { timeout: 30000 });
  const api1 = await api(dev.tenant_token, 'GET', '/v1/tenants/demo/workloads/console-train');
  assert.equal(api1.json.data.status.phase, 'running');
  assert.deepEqual(api1.json.data.spec.command.slice(0, 2), ['sh', '-c']);
  await shot('console-tenant-workload');
  await page.goto(`${dev.address}/ui/#/tenant/demo/nodes`);
  const tile = await page.waitForSelector('#gpu-map [data-workload="console-train"][data-kind="whole"]');
  assert.equal(await tile.evaluate((e) => e.dataset.tenant), 'demo');
  const node = api1.json.data.status.tasks[0].node;
  assert.equal(await tile.evaluate((e) => e.closest('[data-node]').dataset.node), node);
});

test('a tenant token cannot see another tenant\'s workload in the console', async () => {
  assert.equal((await api(dev.root_token, 'POST', '/v1/tenants/rival', { quota: { gpu: 4 } })).status < 300, true);
  const tok = await api(dev.root_token, 'POST', '/v1/auth/token/create', { tenant: 'rival', policies: ['tenant-admin'], ttl: '1h' });
  const rival = tok.json.auth.client_token;
  assert.equal((await api(rival, 'POST', '/v1/tenants/rival/workloads/rival-secret',
                          { gpu: { count: 1 }, command: ['sleep', '600'] })).status, 202);
  await until('rival-secret to run', async () =>
    (await api(rival, 'GET', '/v1/tenants/rival/workloads/rival-secret')).json?.data?.status?.phase === 'running');
  // The console, as demo, asked straight for it: the API answers 404 and the page says so.
  const answered = page.waitForResponse((r) => r.url().includes('/v1/tenants/rival/workloads/rival-secret'));
  await page.goto(`${dev.address}/ui/#/tenant/rival/workloads/rival-secret`);
  assert.equal((await answered).status(), 404);
  const err = await page.waitForSelector('.error[role=alert]');
  assert.match(await err.evaluate((e) => e.textContent), /404/);
  assert.equal(await page.$('#workload-phase'), null);
  // Its own lists and map show nothing of rival's.
  await page.goto(`${dev.address}/ui/#/tenant/demo/workloads`);
  await page.waitForSelector('#workloads-table [data-workload="console-train"]');
  assert.equal(await page.$('[data-workload="rival-secret"]'), null);
  await page.goto(`${dev.address}/ui/#/tenant/demo/nodes`);
  await page.waitForSelector('#gpu-map [data-workload="console-train"]');
  assert.equal(await page.$('#gpu-map [data-tenant="rival"]'), null);
  assert.equal((await api(dev.tenant_token, 'GET', '/v1/tenants/rival/workloads/rival-secret')).status, 404);
});

test('the tenant pages: queues over time, secrets metadata without values, grants, audit', async () => {
  await api(dev.tenant_token, 'POST', '/v1/tenants/demo/secrets/kv/data/app/db', { data: { password: 'hunter2-console' } });
  await api(dev.tenant_token, 'POST', '/v1/tenants/demo/grants', { to: 'rival', on: 'secrets/kv/data/app/db', policy: 'read', ttl: '4h' });
  await page.goto(`${dev.address}/ui/#/tenant/demo/queues`);
  await page.waitForSelector('#queues-table [data-queue="demo/default"]');
  await page.waitForFunction(() => document.querySelectorAll('.chart canvas').length > 0);
  // A few samples, and a step: a curve that moves when a workload starts.
  await new Promise((r) => setTimeout(r, 3500));
  assert.equal((await api(dev.tenant_token, 'POST', '/v1/tenants/demo/workloads/step-up',
                          { gpu: { count: 2 }, command: ['sleep', '600'] })).status, 202);
  await new Promise((r) => setTimeout(r, 6500));
  await shot('console-tenant-queues');
  await page.goto(`${dev.address}/ui/#/tenant/demo/secrets/app/db`);
  await page.waitForSelector('#open-secret');
  assert.doesNotMatch(await page.content(), /hunter2-console/);  // Metadata only, until opened.
  await page.click('#open-secret');
  await page.waitForFunction(() => /hunter2-console/.test(document.querySelector('#secret-value')?.textContent ?? ''));
  await page.goto(`${dev.address}/ui/#/tenant/demo/grants`);
  const left = await page.waitForSelector('#grants-table td.mono');
  assert.match(await left.evaluate((e) => e.textContent), /secrets\/kv\/data\/app\/db/);
  assert.match(await page.$eval('#grants-table tbody tr', (e) => e.textContent), /3h 5\dm|4h 0m|3h/);
  await page.goto(`${dev.address}/ui/#/tenant/demo/audit`);
  await page.waitForFunction(() => /secrets\/kv\/data\/app\/db/.test(document.querySelector('#audit-table')?.textContent ?? ''));
  await page.goto(`${dev.address}/ui/#/tenant/demo/workloads`);
  await page.waitForSelector('#workloads-table [data-workload="console-train"]');
  await shot('console-tenant-workloads');
});

test('a revoked token sends the console back to the login form, saying why', async () => {
  const t = await api(dev.tenant_token, 'POST', '/v1/tenants/demo/auth/token/create', { policies: ['tenant-admin'], ttl: '1h', display_name: 'short' });
  const token = t.json.auth.client_token;
  await logoutNow();
  await loginAs(token);
  await page.goto(`${dev.address}/ui/#/tenant/demo/workloads`);
  await page.waitForSelector('#workloads-table');
  assert.equal((await api(dev.tenant_token, 'POST', '/v1/tenants/demo/auth/token/revoke', { accessor: t.json.auth.accessor })).status, 204);
  const reason = await page.waitForSelector('#login-reason', { timeout: 15000 });
  assert.match(await reason.evaluate((e) => e.textContent), /expired or was revoked/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('tessera.token')), null);
});

test('the operator\'s fleet map shows MIG tiles by profile and fractional shares, cordoned nodes marked', async () => {
  for (const [name, gpu] of [['mig-small', { count: 1, mig: '1g.10gb' }], ['mig-large', { count: 1, mig: '3g.40gb' }],
                             ['half-a', { count: 1, milli: 500 }], ['quarter-b', { count: 1, milli: 250 }]]) {
    const r = await api(dev.tenant_token, 'POST', `/v1/tenants/demo/workloads/${name}`, { gpu, command: ['sleep', '600'] });
    assert.equal(r.status, 202, r.text);
  }
  assert.equal((await api(dev.root_token, 'POST', '/v1/nodes/dgx-h100-1/cordon')).status, 200);
  await loginAs(dev.root_token);
  assert.match(await page.$eval('.scope-badge', (e) => e.textContent), /operator/);
  await page.goto(`${dev.address}/ui/#/fleet`);
  const small = await page.waitForSelector('#gpu-map [data-kind="mig"][data-workload="mig-small"]', { timeout: 30000 });
  const large = await page.waitForSelector('#gpu-map [data-kind="mig"][data-workload="mig-large"]', { timeout: 30000 });
  const half = await page.waitForSelector('#gpu-map [data-kind="share"][data-workload="half-a"]', { timeout: 30000 });
  await page.waitForSelector('#gpu-map [data-kind="share"][data-workload="quarter-b"]');
  await page.waitForSelector('#gpu-map [data-tenant="rival"]');  // The operator sees every tenant.
  // Sized as the GPU they hold: 1 and 4 of 8 memory slices; half a GPU.
  const frac = (h) => h.evaluate((e) => e.getBoundingClientRect().width / e.parentElement.getBoundingClientRect().width);
  assert.equal(await small.evaluate((e) => e.dataset.slices), '1');
  assert.equal(await large.evaluate((e) => e.dataset.slices), '4');
  assert.ok(Math.abs((await frac(small)) - 1 / 8) < 0.02, `1g.10gb tile is ${await frac(small)} of its GPU`);
  assert.ok(Math.abs((await frac(large)) - 4 / 8) < 0.02, `3g.40gb tile is ${await frac(large)} of its GPU`);
  assert.ok(Math.abs((await frac(half)) - 0.5) < 0.02, `half a GPU is ${await frac(half)} of its GPU`);
  assert.equal(await small.evaluate((e) => e.closest('[data-gpu]').dataset.mig), 'true');
  // Tenants in different colours.
  const colours = await page.$$eval('#gpu-map .use', (els) => [...new Set(els.map((e) => `${e.dataset.tenant}=${getComputedStyle(e).backgroundColor}`))]);
  const demo = colours.filter((c) => c.startsWith('demo=')), rival = colours.filter((c) => c.startsWith('rival='));
  assert.equal(demo.length, 1);
  assert.equal(rival.length, 1);
  assert.notEqual(demo[0].split('=')[1], rival[0].split('=')[1]);
  assert.equal(await page.$eval('[data-node="dgx-h100-1"]', (e) => e.dataset.cordoned), 'true');
  await page.waitForSelector('[data-node="dgx-h100-1"] .badge.cordon');
  await shot('console-operator-fleet');
  // Every tenant's workloads on one page (as `tessera ps -A`), each with its tenant.
  await page.goto(`${dev.address}/ui/#/all-workloads`);
  await page.waitForSelector('#all-workloads-table [data-tenant="rival"][data-workload="rival-secret"]');
  await page.waitForSelector('#all-workloads-table [data-tenant="demo"][data-workload="mig-small"]');
  await page.goto(`${dev.address}/ui/#/tenants`);
  await page.waitForSelector('#tenants-table [data-tenant="rival"]');
  await page.waitForSelector('#queues-table [data-queue="demo/default"]');
  await new Promise((r) => setTimeout(r, 6500));
  await shot('console-operator-tenants');
});

test('evictions show with why: on the workload\'s events and the operator\'s evictions page', async () => {
  // demo takes every free GPU; rival, under its quota, asks for more: reclaim takes demo's back.
  // (Uncordoned first: fair shares are of the whole fleet, cordoned nodes included, so with one
  // out of service demo would stay under its share and nothing would be reclaimed.)
  assert.equal((await api(dev.root_token, 'POST', '/v1/nodes/dgx-h100-1/uncordon')).status, 200);
  assert.equal((await api(dev.tenant_token, 'POST', '/v1/tenants/demo/workloads/filler',
                          { tasks: 24, minAvailable: 1, gpu: { count: 1 }, command: ['sleep', '600'] })).status, 202);
  await until('filler to run', async () =>
    (await api(dev.tenant_token, 'GET', '/v1/tenants/demo/workloads/filler')).json?.data?.status?.phase === 'running');
  assert.equal((await api(dev.root_token, 'POST', '/v1/tenants/rival/workloads/rival-burst',
                          { gpu: { count: 3 }, command: ['sleep', '600'] })).status, 202);
  const evicted = await until('an eviction of filler', async () => {
    const ev = (await api(dev.tenant_token, 'GET', '/v1/tenants/demo/workloads/filler/events')).json?.data?.events ?? [];
    return ev.find((e) => e.event === 'evicted');
  }, 30000);
  assert.match(evicted.reason, /reclaimed by queue rival/);
  await page.goto(`${dev.address}/ui/#/evictions`);
  const row = await page.waitForSelector('#evictions-table tbody tr', { timeout: 30000 });
  assert.match(await row.evaluate((e) => e.textContent), /filler.*reclaimed by queue rival/);
  await page.waitForFunction(() => document.querySelectorAll('.chart canvas').length > 0);
  await shot('console-operator-evictions');
  await page.goto(`${dev.address}/ui/#/tenant/demo/workloads/filler`);
  const ev = await page.waitForSelector('#events-table tr.evicted');
  assert.match(await ev.evaluate((e) => e.textContent), /evicted.*reclaimed by queue rival/);
});

test('the console ran without script errors or CSP violations', () => {
  assert.deepEqual(consoleErrors.filter((e) => !/status of 40[34]/.test(e)), []);
});
