'use strict';
// The Node client of scripts/sdk-bench.sh: the same closed loop as the Rust client
// (crates/bench/examples/request_client.rs), through the agentwire Node API.
//
// usage: node request_client.js HUB_URL CA_PEM AGENTS WINDOW SIZE SECONDS WARMUP_SECONDS TARGETS
//
// Prints one JSON line: requests, errors, msg/s, latency percentiles (µs), and this process's
// CPU seconds (and µs of CPU per request) over the measured part.
const agentwire = require('..');

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  const k = Math.max(0, Math.min(sorted.length - 1, Math.round((p / 100) * sorted.length + 0.5) - 1));
  return sorted[k];
}

const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

async function main(argv) {
  if (argv.length !== 8) {
    throw new Error('usage: request_client.js HUB_URL CA_PEM AGENTS WINDOW SIZE SECONDS WARMUP_SECONDS TARGETS');
  }
  const [hub, ca] = argv;
  const [agents, windowSize, size, seconds, warmup, targets] = argv.slice(2).map(Number);
  const clients = [];
  for (let a = 0; a < agents; a++) {
    clients.push(await agentwire.connect({ hub, id: `node-client-${a}`, ca, connectTimeoutMs: 30000 }));
  }
  const body = Buffer.alloc(size, 'x');
  const now = () => performance.now();
  const start = now();
  const measureFrom = start + warmup * 1000;
  const stop = measureFrom + seconds * 1000;
  const latencies = [];
  let errors = 0;
  async function run(agent, target) {
    while (now() < stop) {
      const t0 = now();
      let ok = true;
      try {
        await agent.request(target, body, { timeoutMs: 10000 });
      } catch {
        ok = false;
      }
      const t1 = now();
      if (t0 >= measureFrom && t1 <= stop) {
        if (ok) latencies.push(Math.round((t1 - t0) * 1000));
        else errors++;
      }
    }
  }
  const loops = [];
  clients.forEach((c, a) => {
    for (let w = 0; w < windowSize; w++) loops.push(run(c, `echo-${(a * windowSize + w) % targets}`));
  });
  await sleep(measureFrom - now());
  const cpu0 = process.cpuUsage();
  await sleep(stop - now());
  const used = process.cpuUsage(cpu0);
  const cpu = (used.user + used.system) / 1e6;
  await Promise.all(loops);
  latencies.sort((x, y) => x - y);
  const requests = latencies.length;
  console.log(JSON.stringify({
    client: 'node', agents, window: windowSize, size, seconds, requests, errors,
    msg_per_s: requests / seconds,
    p50_us: percentile(latencies, 50), p90_us: percentile(latencies, 90), p99_us: percentile(latencies, 99),
    cpu_s: cpu, cpu_us_per_msg: requests ? (cpu * 1e6) / requests : 0,
  }));
  await Promise.all(clients.map((c) => c.close()));
}

main(process.argv.slice(2)).catch((e) => {
  console.error(e);
  process.exit(1);
});
