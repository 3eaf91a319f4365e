// The `pg` package, loaded without its Cloudflare check waking Node's fetch. At load, pg asks whether
// it runs inside a Cloudflare Worker: where `navigator` is missing (Node 20) it builds a `Response`,
// and the first touch of that global makes Node load undici with http2 and worker_threads, about
// 2 MB an idle provider never uses. While pg loads, and only then, `Response` is hidden (pg then
// takes the plain Node sockets it would take anyway) and put back exactly as it was: loading is
// synchronous, so nothing else runs in between. A CommonJS file, so that `require` is synchronous
// and a bundler still sees which package it loads.

type Pg = typeof import("pg");

const RESPONSE = "Response";
const before = Object.getOwnPropertyDescriptor(globalThis, RESPONSE);
let pg: Pg;
if (before?.configurable === true) {
  Object.defineProperty(globalThis, RESPONSE, { value: undefined, configurable: true, writable: true });
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- synchronous on purpose, see above
    pg = require("pg") as Pg;
  } finally {
    Object.defineProperty(globalThis, RESPONSE, before);
  }
} else {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- as above
  pg = require("pg") as Pg;
}

export = pg;
