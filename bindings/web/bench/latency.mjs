// Request/reply latency from headless Chromium over WebTransport and over WebSocket, side by
// side in interleaved rounds: in each round one page agent per transport asks the hub's echo
// agent `requests` questions of `size` bytes, `inflight` at a time, after a warm-up.
// scripts/browser-netsim.sh runs it inside the client namespace of an emulated path.
//
// usage: node bench/latency.mjs --wt URL --ws URL --hash HEX --pin HEX --token T
//          [--rounds 5] [--requests 1000] [--inflight 16] [--size 1024] [--out FILE]
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { serveFiles, startBrowser } from '../test/browser/rig.js';

const { values: o } = parseArgs({
  options: {
    wt: { type: 'string' },
    ws: { type: 'string' },
    hash: { type: 'string' },
    pin: { type: 'string' },
    token: { type: 'string', default: '' },
    rounds: { type: 'string', default: '5' },
    requests: { type: 'string', default: '1000' },
    inflight: { type: 'string', default: '16' },
    size: { type: 'string', default: '1024' },
    warmup: { type: 'string', default: '32' },
    out: { type: 'string' },
  },
});
const n = (k) => Number(o[k]);

/** Runs in the page: one agent, warm-up, then the measured requests. */
async function measure({ hub, hash, token, requests, inflight, size, warmup }) {
  const agent = await agentwire.connect({ hub, id: `page-${Math.random().toString(16).slice(2, 8)}`, token,
    serverCertificateHashes: [hash], connectTimeoutMs: 10000 });
  const body = new Uint8Array(size).fill(97);
  for (let i = 0; i < warmup; i++) await agent.request('echo', body, { timeoutMs: 10000 });
  const latencies = [];
  let errors = 0;
  let next = 0;
  const start = performance.now();
  const one = async () => {
    while (next < requests) {
      next += 1;
      const t = performance.now();
      try {
        const answer = await agent.request('echo', body, { timeoutMs: 10000 });
        if (answer.body.length !== size) errors += 1;
        else latencies.push(performance.now() - t);
      } catch {
        errors += 1;
      }
    }
  };
  await Promise.all(Array.from({ length: inflight }, one));
  const elapsed = (performance.now() - start) / 1000;
  const transport = agent.transport;
  await agent.close();
  return { transport, elapsed_s: elapsed, latencies_ms: latencies, errors };
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];

function summary(r) {
  const s = [...r.latencies_ms].sort((a, b) => a - b);
  return {
    transport: r.transport,
    answered: s.length,
    errors: r.errors,
    msg_per_s: s.length / r.elapsed_s,
    p50_ms: pct(s, 0.5),
    p90_ms: pct(s, 0.9),
    p99_ms: pct(s, 0.99),
    max_ms: s[s.length - 1],
  };
}

const files = await serveFiles();
const browser = await startBrowser([o.pin]);
const rounds = [];
try {
  await browser.client.Page.navigate({ url: `${files.origin}/test/browser/page.html` });
  for (let i = 0; i < 100 && !(await browser.eval('window.ready === true')); i++) await new Promise((r) => setTimeout(r, 50));
  for (let round = 1; round <= n('rounds'); round++) {
    const order = round % 2 === 1 ? ['wt', 'ws'] : ['ws', 'wt'];
    for (const t of order) {
      const r = await browser.run(measure, { hub: o[t], hash: o.hash, token: o.token, requests: n('requests'),
        inflight: n('inflight'), size: n('size'), warmup: n('warmup') });
      const s = summary(r);
      rounds.push({ round, ...s, latencies_ms: r.latencies_ms.map((x) => Math.round(x * 100) / 100) });
      console.log(`round ${round} ${s.transport.padEnd(12)} ${s.msg_per_s.toFixed(1).padStart(7)} msg/s  p50 ${s.p50_ms.toFixed(1)}  p90 ${s.p90_ms.toFixed(1)}  p99 ${s.p99_ms.toFixed(1)} ms  errors ${s.errors}`);
    }
  }
} finally {
  await browser.close();
  files.server.close();
}
const version = await import('node:child_process').then((cp) => cp.execFileSync('chromium', ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()).catch(() => 'unknown');
const result = { browser: version, requests: n('requests'), inflight: n('inflight'), size: n('size'), warmup: n('warmup'), rounds };
if (o.out) writeFileSync(o.out, JSON.stringify(result));
