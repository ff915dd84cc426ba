// What one open console tab costs the audit log (issue #37, item 4; docs/benchmarks.md):
// `tessera dev` with its three in-process agents (two DGX H100, one 8x A100), one running
// workload, and Debian's headless Chromium on the tenant's workload list, left alone. The audit
// log's growth is measured over a window without the tab (the idle fleet: its agents' routine
// calls are not recorded, their credentials' renewals are) and over a window with it; both are
// extrapolated to a day, and the tab's own share (its token's records and the checkpoints
// that follow them) is counted from the records.
//
//   node bench/console_audit.mjs [TAB_SECONDS=600] [BASELINE_SECONDS=120] [PAGE=workloads]
//
// Environment: TESSERA_BINARY_DIR (default build), TESSERA_NODE_MODULES (puppeteer-core; default
// build/web/node_modules), TESSERA_CHROMIUM (default /usr/bin/chromium).
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';

const tabSeconds = Number(process.argv[2] ?? 600);
const baselineSeconds = Number(process.argv[3] ?? 120);
const pageName = process.argv[4] ?? 'workloads';
const binaryDir = path.resolve(process.env.TESSERA_BINARY_DIR ?? 'build');
const nodeModules = path.resolve(process.env.TESSERA_NODE_MODULES ?? path.join(binaryDir, 'web', 'node_modules'));
const chromium = process.env.TESSERA_CHROMIUM ?? '/usr/bin/chromium';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function api(dev, token, method, p, body) {
  return new Promise((resolve, reject) => {
    const req = https.request(new URL(p, dev.address), {
      method, ca: fs.readFileSync(dev.ca_cert),
      headers: { 'X-Tessera-Token': token, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(text || 'null') }));
    });
    req.on('error', reject);
    req.end(body ? JSON.stringify(body) : undefined);
  });
}

// Bytes in the audit log and its rotated files.
function auditBytes(dir) {
  return fs.readdirSync(dir).filter((f) => f === 'audit.log' || f.startsWith('audit.log.2'))
    .reduce((n, f) => n + fs.statSync(path.join(dir, f)).size, 0);
}

// Records appended since `offset` bytes into audit.log, counted by method and path, and the
// bytes the tab caused: the records of its token (its accessor, HMAC'd, as its first list of
// workloads carries it) and the signed checkpoints that follow one of them (a checkpoint is
// written within the interval after a record: without the tab's records, not those).
function recordsSince(dir, offset) {
  const text = fs.readFileSync(path.join(dir, 'audit.log')).subarray(offset).toString();
  const by = new Map();
  let n = 0;
  let accessor = null;
  let tabBytes = 0;
  let lastWasTab = false;
  for (const line of text.split('\n')) {
    if (!line) continue;
    const r = JSON.parse(line);
    ++n;
    const p = (r.request?.path ?? '').replace(/\?.*/, '');
    const key = `${r.type} ${r.request?.method ?? ''} ${p}`;
    by.set(key, (by.get(key) ?? 0) + 1);
    if (accessor === null && p === 'tenants/demo/workloads') accessor = r.auth?.accessor ?? null;
    if (r.type === 'checkpoint') {
      if (lastWasTab) tabBytes += line.length + 1;
      lastWasTab = false;
    } else {
      lastWasTab = accessor !== null && r.auth?.accessor === accessor;
      if (lastWasTab) tabBytes += line.length + 1;
    }
  }
  return { n, tabBytes, by: [...by.entries()].sort((a, b) => b[1] - a[1]) };
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tessera-console-audit-'));
const server = spawn(path.join(binaryDir, 'tessera'),
                     ['dev', '--data-dir', dir, '--addr', '127.0.0.1:0', '--nodes', 'dgx-h100:2,a100-8x:1'],
                     { stdio: ['ignore', 'ignore', fs.openSync(path.join(dir, 'server.log'), 'w')] });
let browser;
try {
  let dev = null;
  for (let i = 0; i < 600 && !dev; ++i) {
    await sleep(100);
    const p = path.join(dir, 'dev.json');
    if (fs.existsSync(p)) {
      const d = JSON.parse(fs.readFileSync(p, 'utf8'));
      dev = d.pid === server.pid ? d : null;
    }
  }
  if (!dev) throw new Error('tessera dev did not start');
  for (let i = 0; i < 300; ++i) {
    const r = await api(dev, dev.root_token, 'GET', '/v1/nodes');
    if (r.json?.data?.nodes?.length === 3 && r.json.data.nodes.every((n) => n.state === 'ready')) break;
    await sleep(200);
  }
  const w = await api(dev, dev.tenant_token, 'POST', '/v1/tenants/demo/workloads/train',
                      { gpu: { count: 1 }, command: ['sleep', '3600'] });
  if (w.status !== 202) throw new Error(`submit: ${w.status}`);
  await sleep(3000);

  // The idle fleet alone.
  let start = auditBytes(dir);
  await sleep(baselineSeconds * 1000);
  const fleetBytes = auditBytes(dir) - start;

  // One tab on the tenant's page, logged in with the tenant's token, left alone.
  const require = createRequire(path.join(nodeModules, 'noop.js'));
  const puppeteer = require('puppeteer-core');
  browser = await puppeteer.launch({
    executablePath: chromium, headless: true, acceptInsecureCerts: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = await browser.newPage();
  await page.goto(`${dev.address}/ui/`, { waitUntil: 'domcontentloaded' });
  await page.waitForSelector('#login-form');
  await page.type('#token', dev.tenant_token);
  await page.click('#login-form button[type=submit]');
  await page.waitForSelector('#logout');
  await page.goto(`${dev.address}/ui/#/tenant/demo/${pageName}`);
  await sleep(5000);  // Past the page's first requests: what an idle tab costs from then on.
  start = auditBytes(dir);
  const offset = fs.statSync(path.join(dir, 'audit.log')).size;
  await sleep(tabSeconds * 1000);
  const tabBytes = auditBytes(dir) - start;
  const records = recordsSince(dir, offset);
  const perDay = (bytes, s) => Math.round((bytes * 86400) / s);
  const fleetRate = fleetBytes / baselineSeconds;
  const tabOnly = tabBytes - fleetRate * tabSeconds;
  console.log(JSON.stringify({
    page: pageName,
    baseline_seconds: baselineSeconds,
    fleet_bytes: fleetBytes,
    fleet_bytes_per_day: perDay(fleetBytes, baselineSeconds),
    tab_seconds: tabSeconds,
    fleet_and_tab_bytes: tabBytes,
    window_records: records.n,
    window_bytes_per_day_less_fleet: perDay(tabOnly, tabSeconds),
    tab_bytes: records.tabBytes,
    tab_bytes_per_day: perDay(records.tabBytes, tabSeconds),
    records_by_kind: records.by.slice(0, 8),
  }, null, 2));
} finally {
  await browser?.close();
  server.kill('SIGTERM');
  await new Promise((r) => server.once('exit', r));
  fs.rmSync(dir, { recursive: true, force: true });
}
