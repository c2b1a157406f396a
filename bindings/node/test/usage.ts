// Type-checked (not run) by types.test.js: the README's uses of the API compile against
// index.d.ts and compat.d.ts under `strict`.
import { connect, Hub, Message, RemoteError, type Agent } from '../index.js';
import { loadQuicTransport, type AgentMessage } from '../compat.js';

async function coordinator(): Promise<void> {
  const hub = await Hub.start({ listen: ['quic://127.0.0.1:0'] });
  const agent: Agent = await connect({ hub: hub.url, id: 'boss', pin: hub.pin });
  const reply: Message = await agent.request('worker', Buffer.from('hi'), { timeoutMs: 5000 });
  const body: Buffer = reply.body;
  const sender: string = reply.sender;
  const headers: Record<string, string> = reply.headers;
  await agent.send('worker', 'event', { priority: 'high', headers: { a: 'b' } });
  await agent.subscribe('news');
  await agent.publish('news', new Uint8Array([1]));
  const ids: number[] = await agent.publishMany('news', ['a', new Uint8Array([2])]);
  const { task, duplicate } = await agent.enqueue('jobs', 'x', { producerId: 'p' });
  await agent.consume('jobs', { credit: 4 });
  for await (const msg of agent) {
    if (msg.isRequest) await msg.reply(msg.body);
    if (msg.queue !== null) await agent.ack(msg);
  }
  try {
    await agent.request('nobody', 'x');
  } catch (e) {
    if (e instanceof RemoteError) console.log(e.code, e.codeName);
  }
  console.log(body, sender, headers, task, duplicate, agent.stats());
  await agent.close();
  hub.close();
}

async function compat(): Promise<void> {
  const transport = await loadQuicTransport({ hub: 'quic://127.0.0.1:4433', id: 'me', ca: 'certs/ca.pem' });
  const m: AgentMessage = { id: '1', type: 'task', payload: {} };
  await transport.send('peer', m);
  const got: AgentMessage = await transport.receive('peer');
  const answer: AgentMessage = await transport.request('peer', m);
  await transport.sendBatch('peer', [m, m]);
  const stats = await transport.getStats();
  console.log(got, answer, stats.active);
  await transport.close();
}

void coordinator;
void compat;
