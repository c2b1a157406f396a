// A Web Worker that is an agent: asks `to` `count` questions and posts what came back.
import { connect } from '/dist/index.js';

self.onmessage = async ({ data }) => {
  try {
    const agent = await connect(data.options);
    let ok = 0;
    for (let i = 0; i < data.count; i++) {
      const answer = await agent.request(data.to, `from a worker ${i}`);
      if (answer.text === `from a worker ${i}`) ok += 1;
    }
    const transport = agent.transport;
    await agent.close();
    self.postMessage({ ok, transport });
  } catch (e) {
    self.postMessage({ error: `${e.name}: ${e.message}` });
  }
};
