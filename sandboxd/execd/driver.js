// execd code-context driver: requests on fd 3, events on fd 4, one JSON object a line.
const vm = require('vm'), fs = require('fs'), util = require('util'), readline = require('readline');
const emit = (e) => fs.writeSync(4, JSON.stringify(e) + '\n');
const out = (t) => (...a) => emit({ type: t, text: util.format(...a) + '\n' });
const con = { log: out('stdout'), info: out('stdout'), debug: out('stdout'), warn: out('stderr'), error: out('stderr') };
const ctx = vm.createContext({
  console: con, require, process, Buffer, URL, TextEncoder, TextDecoder,
  setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate, queueMicrotask,
});
process.on('SIGINT', () => {});
let n = 0, chain = Promise.resolve();
async function run(code) {
  n++;
  try {
    let v = vm.runInContext(code, ctx, { filename: '<cell>', breakOnSigint: true });
    if (v && typeof v.then === 'function') v = await v;
    emit({ type: 'done', count: n, result: v === undefined ? null : util.inspect(v) });
  } catch (e) {
    const name = (e && e.name) || 'Error', msg = (e && e.message !== undefined) ? e.message : String(e);
    emit({ type: 'done', count: n, error: { ename: name, evalue: msg, traceback: String((e && e.stack) || e).split('\n') } });
  }
}
readline.createInterface({ input: fs.createReadStream(null, { fd: 3 }) })
  .on('line', (l) => { chain = chain.then(() => run(JSON.parse(l).code)); })
  .on('close', () => chain.then(() => process.exit(0)));
