// Opens the demo page in headless Chromium (over the DevTools protocol, with the web SDK's
// test rig), waits until it has `count` answers, and saves the page as a PNG.
//
// usage: node examples/browser/screenshot.mjs URL PNG COUNT PIN   (run.sh --screenshot calls it;
// PIN: the page server's key, sha256 hex, trusted by the browser for this run)
import { writeFileSync } from 'node:fs';
import { startBrowser } from '../../bindings/web/test/browser/rig.js';

const [url, png, count, pin] = process.argv.slice(2);
const browser = await startBrowser(pin ? [pin] : []);
try {
  await browser.client.Emulation.setDeviceMetricsOverride({ width: 900, height: 760, deviceScaleFactor: 1, mobile: false });
  await browser.client.Page.navigate({ url });
  const until = Date.now() + 60_000;
  let done = null;
  while (done !== count) {
    if (Date.now() > until) throw new Error(`the page did not finish ${count} questions in 60 s`);
    await new Promise((r) => setTimeout(r, 100));
    done = await browser.eval('document.body?.dataset.done ?? null');
  }
  const summary = await browser.eval(
    `[...document.querySelectorAll('#status, .stat')].map((e) => e.innerText.replace(/\\s+/g, ' ')).join(' | ')`,
  );
  const { data } = await browser.client.Page.captureScreenshot({ format: 'png' });
  writeFileSync(png, Buffer.from(data, 'base64'));
  console.log(`${png}: ${summary}`);
  const errors = await browser.eval(`document.getElementById('errors').textContent`);
  if (errors !== '0') throw new Error(`the page counted ${errors} failed requests`);
} finally {
  await browser.close();
}
