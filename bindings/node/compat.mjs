import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const compat = require('./compat.js');

export const { QuicTransport, loadQuicTransport } = compat;
export default compat;
