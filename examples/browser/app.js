// The demo page: one agent (WebTransport, or WebSocket where the browser has none), asking the
// workers `worker-1` and `worker-2` for prime counts, 16 at a time, and showing each answer's
// round trip as it comes. `config.js` is written by run.sh: the hub's addresses and the hash of
// the certificate it serves to browsers.
import { connect } from './sdk/index.js';
import config from './config.js';

const $ = (id) => document.getElementById(id);
const latencies = [];
let errors = 0;

function percentile(sorted, p) {
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
}

function draw() {
  const sorted = [...latencies].sort((a, b) => a - b);
  $('answered').textContent = latencies.length;
  $('errors').textContent = errors;
  for (const [id, p] of [['p50', 0.5], ['p90', 0.9], ['max', 1]]) {
    $(id).textContent = sorted.length ? percentile(sorted, p).toFixed(1) : '–';
  }
  const c = $('chart').getContext('2d');
  const { width, height } = c.canvas;
  c.clearRect(0, 0, width, height);
  const top = Math.max(1, percentile(sorted, 1));
  const step = width / Math.max(200, latencies.length);
  c.fillStyle = '#3b6fd8';
  latencies.forEach((ms, i) => {
    const h = Math.max(2, (ms / top) * (height - 10));
    c.fillRect(i * step, height - h, Math.max(1, step - 1), h);
  });
}

function show(answer, ms) {
  const row = document.createElement('tr');
  for (const v of [answer.worker, answer.n.toLocaleString(), answer.primes.toLocaleString(), answer.work_us, ms.toFixed(1)]) {
    const td = document.createElement('td');
    td.textContent = v;
    row.append(td);
  }
  const body = $('answers');
  body.prepend(row);
  while (body.children.length > 12) body.lastChild.remove();
}

async function run(agent, total) {
  $('run').disabled = true;
  let next = 0;
  const inflight = Math.max(1, Math.min(256, Number($('inflight').value) || 16));
  const one = async () => {
    while (next < total) {
      const i = next++;
      const n = 1000 + ((i * 7919) % 200_000);
      const start = performance.now();
      try {
        const answer = await agent.request(`worker-${1 + (i % 2)}`, JSON.stringify({ n }), { timeoutMs: 5000 });
        const ms = performance.now() - start;
        latencies.push(ms);
        show(answer.json(), ms);
      } catch (e) {
        errors += 1;
        console.error(e);
      }
      draw();
    }
  };
  await Promise.all(Array.from({ length: inflight }, one));
  $('run').disabled = false;
  document.body.dataset.done = String(latencies.length + errors);
}

try {
  const agent = await connect({
    hub: config.hub,
    id: `page-${Math.random().toString(16).slice(2, 8)}`,
    token: config.token,
    serverCertificateHashes: config.serverCertificateHashes,
  });
  $('status').innerHTML = `connected as <b></b> over <b></b> to <code></code>`;
  const [who, how] = $('status').querySelectorAll('b');
  who.textContent = agent.id;
  how.textContent = agent.transport;
  $('status').querySelector('code').textContent = agent.url;
  $('run').disabled = false;
  $('run').onclick = () => run(agent, 200);
  const auto = Number(new URLSearchParams(location.search).get('auto'));
  if (auto > 0) run(agent, Math.min(auto, 10_000));
} catch (e) {
  $('status').className = 'error';
  $('status').textContent = `${e.name}: ${e.message}`;
}
