#!/usr/bin/env node
// Compiles standins/contracts/*.sol with the solc JS compiler pinned in package.json (no
// download: the compiler ships inside the npm package) and writes every contract's ABI and
// creation bytecode to one JSON file.
//
//   node compile.js [--out build/contracts.json] [--digest <hex>]
//
// `--digest` is recorded as `sourcesDigest` so standins/contracts.py can tell a stale build from
// a fresh one; it is whatever the caller computed over the sources and the compiler version.
"use strict";

const fs = require("fs");
const path = require("path");
const solc = require("solc");

const EVM_VERSION = "cancun";

function parseArgs(argv) {
  const args = { out: path.join(__dirname, "build", "contracts.json"), digest: null };
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === "--out") args.out = path.resolve(argv[++i]);
    else if (argv[i] === "--digest") args.digest = argv[++i];
    else throw new Error(`unknown argument ${argv[i]}`);
  }
  return args;
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const contractsDir = path.join(__dirname, "contracts");
  const sources = {};
  for (const name of fs.readdirSync(contractsDir).sort()) {
    if (name.endsWith(".sol")) {
      sources[name] = { content: fs.readFileSync(path.join(contractsDir, name), "utf8") };
    }
  }
  const input = {
    language: "Solidity",
    sources,
    settings: {
      evmVersion: EVM_VERSION,
      optimizer: { enabled: true, runs: 200 },
      outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
    },
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input)));
  const problems = output.errors || [];
  for (const problem of problems) process.stderr.write(problem.formattedMessage + "\n");
  if (problems.some((p) => p.severity === "error")) process.exit(1);

  const contracts = {};
  for (const [source, byName] of Object.entries(output.contracts)) {
    for (const [name, compiled] of Object.entries(byName)) {
      if (contracts[name]) throw new Error(`contract name ${name} is defined twice`);
      contracts[name] = {
        source,
        abi: compiled.abi,
        bytecode: "0x" + compiled.evm.bytecode.object,
      };
    }
  }
  const artifact = {
    solcVersion: solc.version(),
    evmVersion: EVM_VERSION,
    sourcesDigest: args.digest,
    contracts,
  };
  fs.mkdirSync(path.dirname(args.out), { recursive: true });
  const tmp = `${args.out}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(artifact, null, 1));
  fs.renameSync(tmp, args.out); // atomic: a concurrent reader sees the old or the new file
  process.stdout.write(`compiled ${Object.keys(contracts).length} contracts to ${args.out}\n`);
}

main();
