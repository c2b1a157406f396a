// The package loads as an ES module too, with the same classes.
import test from 'node:test';
import assert from 'node:assert/strict';
import agentwire, { connect, Hub, RemoteError } from '../index.mjs';
import { loadQuicTransport } from '../compat.mjs';

test('import gives the same API as require', async () => {
  assert.equal(typeof connect, 'function');
  assert.equal(agentwire.Hub, Hub);
  assert.equal(typeof loadQuicTransport, 'function');
  const hub = await Hub.start();
  try {
    const a = await connect({ hub: hub.url, id: 'esm', pin: hub.pin });
    await assert.rejects(a.request('nobody', 'x'), RemoteError);
    await a.close();
  } finally {
    hub.close();
  }
});
