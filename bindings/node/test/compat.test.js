'use strict';
// The compatibility layer: the method names that package's users call, on real agents.
const test = require('node:test');
const assert = require('node:assert/strict');

const agentwire = require('..');
const { loadQuicTransport, QuicTransport } = require('../compat');

test('send, receive, request, sendBatch, getStats, close', async () => {
  const hub = await agentwire.Hub.start();
  try {
    const config = (id) => ({ hub: hub.url, id, pin: hub.pin, maxIdleTimeoutMs: 2000 });
    const a = await loadQuicTransport(config('a'));
    const b = await QuicTransport.create(config('b'));
    await a.send('b', { id: 'msg-001', type: 'task', payload: { action: 'execute' } });
    assert.deepEqual(await b.receive('a'), { id: 'msg-001', type: 'task', payload: { action: 'execute' } });
    await a.sendBatch('b', [1, 2, 3].map((n) => ({ id: `m${n}`, type: 'task', payload: n })));
    const got = [await b.receive('a'), await b.receive('a'), await b.receive()];
    assert.deepEqual(got.map((m) => m.payload).sort(), [1, 2, 3]);
    // request = a real request; the other side answers with send() to the asker.
    const answering = (async () => {
      const req = await b.receive('a');
      await b.send('a', { id: req.id, type: 'result', payload: req.payload * 2 });
    })();
    const answer = await a.request('b', { id: 'q1', type: 'task', payload: 21 });
    assert.deepEqual(answer, { id: 'q1', type: 'result', payload: 42 });
    await answering;
    const stats = await a.getStats();
    assert.deepEqual([stats.active, stats.created, stats.closed], [1, 1, 0]);
    assert.ok(stats.messages_sent >= 5);
    await assert.rejects(b.receive('nobody-sends'), agentwire.TimeoutError);
    await a.close();
    await b.close();
  } finally {
    hub.close();
  }
});
