// A worker in TypeScript: answers "who are you?", consumes the work queue `jobs`, sends each
// result to the coordinator and acks the task; stops when the coordinator says "stop".
//
// usage: node worker.js HUB_URL CA_PEM   (compiled from this file by run.sh with tsc)
import { connect } from 'agentwire';

async function main(hub: string, ca: string): Promise<void> {
  const agent = await connect({ hub, id: 'worker-ts', ca });
  await agent.consume('jobs', { credit: 4 });
  console.log(`worker-ts connected over ${agent.transport}`);
  let handled = 0;
  for await (const msg of agent) {
    if (msg.isRequest) {
      await msg.reply(`worker-ts, TypeScript on Node ${process.version}`);
    } else if (msg.queue === 'jobs') {
      const { n } = msg.json() as { n: number };
      await agent.send('coordinator', JSON.stringify({ n, square: n * n }), {
        headers: { result: 'square' },
      });
      await agent.ack(msg);
      handled++;
    } else if (msg.text === 'stop') {
      break;
    }
  }
  console.log(`worker-ts handled ${handled} tasks`);
  await agent.close();
}

main(process.argv[2], process.argv[3]).catch((e) => {
  console.error(e);
  process.exit(1);
});
