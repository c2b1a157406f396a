// Every call of the Node API once, against a hub started in this process; the README's Node
// section shows this script's output.
//
// usage: node bindings/node/examples/tour.mjs
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, Hub, RemoteError } from '../index.mjs';

const hub = await Hub.start({ listen: ['quic://127.0.0.1:0'], store: mkdtempSync(join(tmpdir(), 'aw-')) });
console.log('hub:', hub.url, 'pin', `${hub.pin.slice(0, 19)}...`);

const worker = await connect({ hub: hub.url, id: 'worker', pin: hub.pin });
console.log('connected:', worker.id, 'over', worker.transport, '- agents at the hub:', hub.agentCount());
const serving = (async () => {
  for await (const msg of worker) {
    if (msg.isRequest) await msg.reply(msg.text.toUpperCase());
    else if (msg.queue !== null) {
      console.log(`worker got task ${msg.id} from ${msg.queue}: '${msg.text}', attempt ${msg.attempt}`);
      await worker.ack(msg);
    } else console.log(`worker got ${msg.kind} from ${msg.sender} to ${msg.to}: '${msg.text}'`);
  }
})();

const boss = await connect({ hub: hub.url, id: 'boss', caPem: hub.caPem });
const reply = await boss.request('worker', Buffer.from('hello'), { timeoutMs: 5000, headers: { trace: 't-1' } });
console.log('request ->', reply.body, 'from', reply.sender, 'kind', reply.kind);
console.log('send -> message id', await boss.send('worker', 'fyi', { priority: 'high' }));
await worker.subscribe('news');
await new Promise((r) => setTimeout(r, 100));
console.log('publish -> message id', await boss.publish('news', 'it rained'));
await new Promise((r) => setTimeout(r, 100));
await worker.unsubscribe('news');
console.log('enqueue ->', await boss.enqueue('jobs', 'resize img-7', { producerId: 'job-7' }));
console.log('enqueue again ->', await boss.enqueue('jobs', 'resize img-7', { producerId: 'job-7' }));
await worker.consume('jobs', { credit: 2 });
await new Promise((r) => setTimeout(r, 200));
await worker.stopConsuming('jobs');
console.log('queueStats ->', await boss.queueStats('jobs'));
try {
  await boss.request('nobody', '?', { timeoutMs: 2000 });
} catch (e) {
  if (e instanceof RemoteError) console.log(`RemoteError: code ${e.code} (${e.codeName}): ${e.message}`);
}
const stats = boss.stats();
console.log('stats -> sent', stats.messages_sent, 'received', stats.messages_received, 'rtt_us', stats.connection.rtt_us);
await boss.close();
await worker.close();
await serving;
console.log('closed:', worker.closedReason);
hub.close();
