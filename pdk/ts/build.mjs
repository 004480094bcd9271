// build.mjs builds an agentic-host plugin written in TypeScript or
// JavaScript into one module file:
//
//   node build.mjs ENTRY.ts OUT.wasm
//
// 1. TypeScript checks the project (tsc --noEmit, when a tsconfig.json is
//    beside the entry); a type error fails the build.
// 2. esbuild bundles the entry and what it imports into one script.
// 3. The script goes into a copy of the JavaScript engine's module
//    (quickjs-wasi's quickjs.wasm) as the custom section "agentic-host.js",
//    which the host reads (plugins/jsmodule.go in agentic-host).
//
// The compiler, the bundler and the engine are this project's npm
// dependencies, resolved from the directory of this file.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const SECTION = "agentic-host.js";
const MAX_SCRIPT = 16 << 20;

const [entryArg, outArg] = process.argv.slice(2);
if (!entryArg || !outArg) {
  console.error("usage: node build.mjs ENTRY.ts OUT.wasm");
  process.exit(2);
}
const entry = resolve(entryArg);
const out = resolve(outArg);
const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "package.json"));

// 1. Type check.
const tsconfig = join(dirname(entry), "tsconfig.json");
if (existsSync(tsconfig) && entry.endsWith(".ts")) {
  const tsc = join(dirname(require.resolve("typescript/package.json")), "bin", "tsc");
  try {
    execFileSync(process.execPath, [tsc, "--noEmit", "-p", tsconfig], { stdio: "inherit" });
  } catch {
    console.error("build: TypeScript found errors (above)");
    process.exit(1);
  }
}

// 2. Bundle.
const esbuild = require("esbuild");
let script;
try {
  const result = await esbuild.build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    format: "iife",
    platform: "neutral",
    target: "es2023",
    charset: "utf8",
    legalComments: "none",
    logLevel: "warning",
  });
  script = result.outputFiles[0].contents;
} catch {
  process.exit(1); // esbuild said why
}
if (script.length === 0 || script.length > MAX_SCRIPT) {
  console.error(`build: the bundled script has ${script.length} bytes (1 to ${MAX_SCRIPT})`);
  process.exit(1);
}

// 3. The engine with the script as a custom section.
const engine = readFileSync(require.resolve("quickjs-wasi/quickjs.wasm"));
const uleb = (n) => {
  const b = [];
  do {
    let byte = n & 0x7f;
    n = Math.floor(n / 128);
    if (n !== 0) byte |= 0x80;
    b.push(byte);
  } while (n !== 0);
  return Buffer.from(b);
};
const name = Buffer.from(SECTION, "utf8");
const payload = Buffer.concat([uleb(name.length), name, Buffer.from(script)]);
writeFileSync(out, Buffer.concat([engine, Buffer.from([0]), uleb(payload.length), payload]));
console.log(out);
