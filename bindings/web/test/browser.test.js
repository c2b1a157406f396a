// The browser SDK in a real browser: headless Chromium, driven over the DevTools protocol,
// runs agents from the package's built code (dist/) against real hubs (the agentwire binary)
// and a Rust echo agent, over WebTransport and over the WebSocket fallback.
//
// Needs the agentwire binary and a `chromium`; without them the suite says so and skips,
// unless AGENTWIRE_REQUIRE_BROWSER is set (CI sets it).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';

import * as rig from './browser/rig.js';

const skip = rig.missing() ?? false;
const TOKEN = 'browser-suite-token';
let dir;
let certs;
let files;
let hub;
let echo;
let browser;
let pageUrl;

/** What every page needs to reach `hub` over WebTransport. */
const wt = (h = hub) => ({
  hub: `https://127.0.0.1:${h.ports.quic}/agentwire`,
  token: TOKEN,
  hashes: [certs.sha256],
});

before(async () => {
  if (skip) return;
  dir = rig.tempDir();
  certs = rig.certDir(dir);
  files = await rig.serveFiles();
  hub = await rig.startHub({ certs, token: TOKEN, origins: [files.origin] });
  echo = await rig.startEcho(hub, certs, TOKEN);
  browser = await rig.startBrowser([hub.pin]);
  pageUrl = `${files.origin}/test/browser/page.html`;
});

after(async () => {
  if (skip) return;
  await browser?.close();
  await echo?.stop();
  await hub?.proc.stop();
  files?.server.close();
  rmSync(dir, { recursive: true, force: true });
});

test('1,000 requests from a page to a Rust agent over WebTransport, 16 in flight, no error', { skip }, async () => {
  await browser.open(pageUrl);
  const r = await browser.run(async ({ hub, token, hashes }) => {
    const agent = await agentwire.connect({ hub, id: 'page-1000', token, serverCertificateHashes: hashes });
    let next = 0;
    let ok = 0;
    const errors = [];
    const worker = async () => {
      while (next < 1000) {
        const i = next++;
        try {
          const answer = await agent.request('echo', `question ${i}`, { timeoutMs: 10000 });
          if (answer.text === `question ${i}` && answer.sender === 'echo') ok += 1;
          else errors.push(`answer ${i}: ${answer.text}`);
        } catch (e) {
          errors.push(`${i}: ${e.name} ${e.message}`);
        }
      }
    };
    await Promise.all(Array.from({ length: 16 }, worker));
    const transport = agent.transport;
    await agent.close();
    return { ok, errors: errors.slice(0, 5), transport, closed: agent.closedReason };
  }, wt());
  assert.deepEqual(r.errors, []);
  assert.equal(r.ok, 1000);
  assert.equal(r.transport, 'webtransport');
});

test('a page subscribes, another publishes; a page answers a request another page sent', { skip }, async () => {
  await browser.open(pageUrl);
  const r = await browser.run(async ({ hub, token, hashes }) => {
    const o = { hub, token, serverCertificateHashes: hashes };
    const a = await agentwire.connect({ ...o, id: 'page-a' });
    const b = await agentwire.connect({ ...o, id: 'page-b' });
    await b.subscribe('news');
    // The subscription is in order with b's other control frames, not with a's messages:
    // wait until a request through the hub shows b's session is being served.
    const served = (async () => {
      for await (const m of b) {
        if (m.isRequest) await m.reply(`b answers ${m.text}`);
        else if (m.to === 'topic:news') {
          got.push(m.text);
          if (got.length === 220) return;
        }
      }
    })();
    const got = [];
    const answer = await a.request('page-b', 'ping');
    for (let i = 0; i < 20; i++) await a.publish('news', `item ${i}`);
    // 200 at once: over WebTransport several share a stream (about 6 KiB each, so a few
    // streams of up to 64 KiB).
    const big = 'x'.repeat(6000);
    const ids = await a.publishMany('news', Array.from({ length: 200 }, (_, i) => `batch ${i} ${big}`));
    await Promise.race([served, new Promise((r) => setTimeout(r, 10000))]);
    await a.close();
    await b.close();
    return {
      answer: answer.text,
      from: answer.sender,
      got: got.map((t) => t.replace(big, '')).sort(),
      ids: ids.length,
      distinct: new Set(ids.map(String)).size,
    };
  }, wt());
  assert.equal(r.answer, 'b answers ping');
  assert.equal(r.from, 'page-b');
  assert.deepEqual([r.ids, r.distinct], [200, 200]);
  const want = [
    ...Array.from({ length: 20 }, (_, i) => `item ${i}`),
    ...Array.from({ length: 200 }, (_, i) => `batch ${i} `),
  ];
  assert.deepEqual(r.got, want.sort());
});

test('a critical message overtakes bulk ones sent before it', { skip }, async () => {
  await browser.open(pageUrl);
  const r = await browser.run(async ({ hub, token, hashes }) => {
    const o = { hub, token, serverCertificateHashes: hashes };
    const sender = await agentwire.connect({ ...o, id: 'page-bulk' });
    const receiver = await agentwire.connect({ ...o, id: 'page-sink' });
    const BULK = 200;
    const bulk = new Uint8Array(64 * 1024);
    const order = [];
    const done = (async () => {
      for await (const m of receiver) {
        order.push(m.priority);
        if (order.length === BULK + 1) return;
      }
    })();
    const sends = [];
    for (let i = 0; i < BULK; i++) sends.push(sender.send('page-sink', bulk, { priority: 'low' }));
    sends.push(sender.send('page-sink', 'now', { priority: 'critical' }));
    await Promise.all(sends);
    await Promise.race([done, new Promise((r) => setTimeout(r, 20000))]);
    await sender.close();
    await receiver.close();
    return { received: order.length, critical: order.indexOf('critical') };
  }, wt());
  assert.equal(r.received, 201);
  // Sent last, behind 12.5 MiB of bulk; it arrives in the first half.
  assert.ok(r.critical >= 0 && r.critical < 100, `the critical message arrived ${r.critical}th of 201`);
});

test('typed errors: wrong token, unknown agent, timeout, abort, too large', { skip }, async () => {
  await browser.open(pageUrl);
  const r = await browser.run(async ({ hub, token, hashes }) => {
    const o = { hub, serverCertificateHashes: hashes };
    const out = {};
    try {
      await agentwire.connect({ ...o, id: 'page-bad-token', token: 'wrong' });
    } catch (e) {
      out.rejected = [e.constructor.name, e.codeName, e instanceof agentwire.RejectedError];
      out.rejectedMessage = e.message;
    }
    const a = await agentwire.connect({ ...o, id: 'page-errors', token, maxFrameSize: 4096 });
    const silent = await agentwire.connect({ ...o, id: 'page-silent', token });
    try {
      await a.request('nobody-here', 'x');
    } catch (e) {
      out.unknown = [e.constructor.name, e.codeName];
    }
    try {
      await a.request('page-silent', 'x', { timeoutMs: 300 });
    } catch (e) {
      out.timeout = [e.constructor.name, e instanceof agentwire.TimeoutError];
    }
    const abort = new AbortController();
    setTimeout(() => abort.abort(), 100);
    try {
      await a.request('page-silent', 'x', { timeoutMs: 5000, signal: abort.signal });
    } catch (e) {
      out.aborted = e.name;
    }
    try {
      await a.send('page-silent', new Uint8Array(8192));
    } catch (e) {
      out.tooLarge = [e.constructor.name, e.codeName];
    }
    try {
      await agentwire.connect({ hub: 'quic://127.0.0.1:1', id: 'x' });
    } catch (e) {
      out.config = e.constructor.name;
    }
    await a.close();
    await silent.close();
    return out;
  }, wt());
  assert.deepEqual(r.rejected, ['RejectedError', 'unauthorized', true], r.rejectedMessage);
  assert.deepEqual(r.unknown, ['RemoteError', 'unknown-agent']);
  assert.deepEqual(r.timeout, ['TimeoutError', true]);
  assert.equal(r.aborted, 'AbortError');
  assert.deepEqual(r.tooLarge, ['TooLargeError', 'frame-too-large']);
  assert.equal(r.config, 'ConfigError');
});

test('a certificate hash that is not the hub\'s is refused', { skip }, async () => {
  await browser.open(pageUrl);
  const r = await browser.run(async ({ hub, token }) => {
    try {
      await agentwire.connect({ hub, id: 'page-wrong-hash', token, serverCertificateHashes: ['00'.repeat(32)], connectTimeoutMs: 5000 });
      return 'connected';
    } catch (e) {
      return e.constructor.name;
    }
  }, wt());
  assert.equal(r, 'ConnectError');
});

test('a page from an origin the hub does not allow gets no session, over either transport', { skip }, async () => {
  const other = await rig.startHub({ certs, token: TOKEN, origins: ['https://app.example.com'] });
  try {
    await browser.open(pageUrl);
    const r = await browser.run(async ({ quic, wss, token, hashes }) => {
      try {
        await agentwire.connect({ hub: [`wt://127.0.0.1:${quic}`, `wss://127.0.0.1:${wss}`], id: 'page-origin', token,
          serverCertificateHashes: hashes, connectTimeoutMs: 5000 });
        return 'connected';
      } catch (e) {
        return `${e.constructor.name}: ${e.message}`;
      }
    }, { ...other.ports, token: TOKEN, hashes: [certs.sha256] });
    assert.match(r, /^ConnectError/);
    assert.match(r, /webtransport\).*websocket\)/, 'both transports were tried and refused');
    // The hub says why, for the WebSocket upgrade (WebTransport's CONNECT answer is a 403 too).
    await other.proc.wait(/403/, 5000).catch(() => {});
  } finally {
    await other.proc.stop();
  }
});

test('with WebTransport off the page falls back to WebSocket and says so', { skip }, async () => {
  const plain = await rig.startHub({ certs, token: TOKEN, webtransport: false });
  const echo2 = await rig.startEcho(plain, certs, TOKEN);
  try {
    await browser.open(pageUrl);
    const r = await browser.run(async ({ quic, wss, token, hashes }) => {
      const agent = await agentwire.connect({
        hub: [`wt://127.0.0.1:${quic}`, `wss://127.0.0.1:${wss}`],
        id: 'page-fallback',
        token,
        serverCertificateHashes: hashes,
        fallbackTimeoutMs: 3000,
      });
      let ok = 0;
      for (let i = 0; i < 100; i++) if ((await agent.request('echo', `q${i}`)).text === `q${i}`) ok += 1;
      // publishMany over WebSocket: one message per frame, in order.
      const reader = await agentwire.connect({ hub: `wss://127.0.0.1:${wss}`, id: 'page-reader', token, serverCertificateHashes: hashes });
      await reader.subscribe('mine');
      await reader.request('echo', 'the subscription is in');
      await agent.publishMany('mine', Array.from({ length: 50 }, (_, i) => `p${i}`));
      const published = [];
      while (published.length < 50) published.push((await reader.recv()).text);
      const out = { transport: agent.transport, attempts: agent.attempts.map((a) => a.transport), ok, published };
      await agent.close();
      await reader.close();
      return out;
    }, { ...plain.ports, token: TOKEN, hashes: [certs.sha256] });
    assert.equal(r.transport, 'websocket');
    assert.deepEqual(r.attempts, ['webtransport']);
    assert.equal(r.ok, 100);
    assert.deepEqual(r.published, Array.from({ length: 50 }, (_, i) => `p${i}`));
  } finally {
    await echo2.stop();
    await plain.proc.stop();
  }
});

test('an idle page stays on the hub through its heartbeats, sent as WebTransport datagrams', { skip }, async () => {
  // Beats every 100 ms; three missed (300 ms) and the hub drops the agent.
  const quick = await rig.startHub({ certs, token: TOKEN, origins: [files.origin], extra: ['--heartbeat-ms', '100', '--miss-limit', '3'] });
  try {
    await browser.open(pageUrl);
    const r = await browser.run(async ({ hub, token, hashes }) => {
      const agent = await agentwire.connect({ hub, id: 'page-idle', token, serverCertificateHashes: hashes });
      await new Promise((r) => setTimeout(r, 1500));
      const out = { closed: agent.closedReason, stats: agent.stats() };
      try {
        await agent.request('nobody-here', 'still there?', { timeoutMs: 2000 });
      } catch (e) {
        out.answer = e.codeName;
      }
      await agent.close();
      return out;
    }, wt(quick));
    assert.equal(r.closed, null);
    assert.equal(r.answer, 'unknown-agent', 'the hub still serves the session');
    assert.ok(r.stats.heartbeatDatagrams >= 5, `heartbeats as datagrams: ${JSON.stringify(r.stats)}`);
    // Every beat went as a datagram (the last may still be on its way when the stats are read).
    assert.ok(r.stats.heartbeatDatagrams >= r.stats.heartbeats - 1, JSON.stringify(r.stats));
  } finally {
    await quick.proc.stop();
  }
});

test('an agent in a Web Worker', { skip }, async () => {
  await browser.open(pageUrl);
  const r = await browser.run(async ({ hub, token, hashes }) => {
    const worker = new Worker('/test/browser/worker.js', { type: 'module' });
    const result = new Promise((resolve) => (worker.onmessage = (ev) => resolve(ev.data)));
    worker.postMessage({ options: { hub, id: 'page-worker', token, serverCertificateHashes: hashes }, to: 'echo', count: 50 });
    const out = await result;
    worker.terminate();
    return out;
  }, wt());
  assert.deepEqual(r, { ok: 50, transport: 'webtransport' });
});

// Last: it restarts the shared hub.
test('the hub restarts: the page learns the session ended, then connects again', { skip }, async () => {
  await browser.open(pageUrl);
  await browser.run(async ({ hub, token, hashes }) => {
    window.restartAgent = await agentwire.connect({ hub, id: 'page-restart', token, serverCertificateHashes: hashes });
    window.pendingRequest = window.restartAgent.request('page-nobody-answers-this', 'x', { timeoutMs: 60000 }).catch((e) => e.constructor.name);
    window.nextMessage = window.restartAgent.recv();
    return (await window.restartAgent.request('echo', 'before')).text;
  }, wt());
  await echo.stop();
  await hub.proc.stop();
  const seen = await browser.run(async () => {
    const agent = window.restartAgent;
    await Promise.race([agent.closed, new Promise((r) => setTimeout(r, 10000))]);
    return { reason: agent.closedReason, next: await window.nextMessage, send: await agent.send('x', 'y').catch((e) => e.constructor.name) };
  });
  assert.ok(seen.reason, 'the agent says why its session ended');
  assert.equal(seen.next, null);
  assert.equal(seen.send, 'ClosedError');
  hub = await rig.startHub({ certs, token: TOKEN, origins: [files.origin], ports: hub.ports });
  echo = await rig.startEcho(hub, certs, TOKEN);
  const again = await browser.run(async ({ hub, token, hashes }) => {
    const agent = await agentwire.connect({ hub, id: 'page-restart', token, serverCertificateHashes: hashes });
    const answer = await agent.request('echo', 'after');
    await agent.close();
    return answer.text;
  }, wt());
  assert.equal(again, 'after');
});
