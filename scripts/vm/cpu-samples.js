#!/usr/bin/env node
// Where the guest's CPUs are, seen from outside: run.sh calls this on a VM that ran out of time,
// before it kills it. It needs nothing from the guest, so it answers even when the guest kernel
// no longer schedules.
//
//   node cpu-samples.js sample MONITOR_SOCKET SAMPLES > FILE
//       asks QEMU's human monitor for every vCPU's registers SAMPLES times, 250 ms apart, and
//       writes them as JSON lines: {"cpu": n, "rip": "ffff...", "cpl": 0, "halted": false}
//   node cpu-samples.js print FILE [KALLSYMS]
//       prints, per vCPU, how often it was halted (idle), in user space, or in which kernel
//       function: named with a copy of the guest's /proc/kallsyms (Debian's System.map is a stub;
//       the guest boots with nokaslr, so one boot's addresses name another's), else as addresses.
'use strict';

/* global require, process, setTimeout, console */
/* eslint-disable @typescript-eslint/no-require-imports */
const fs = require('fs');
const net = require('net');

const PROMPT = '(qemu) ';
const INTERVAL_MS = 250;

/** Sorted text symbols of a /proc/kallsyms copy: [address (BigInt), name [module]]. */
function readSymbols(path) {
  const symbols = [];
  for (const line of fs.readFileSync(path, 'utf8').split('\n')) {
    const [address, kind, name, module] = line.split(/\s+/);
    if (!name || !/^[tTwW]$/.test(kind) || /^0+$/.test(address)) continue;
    symbols.push([BigInt(`0x${address}`), module ? `${name} ${module}` : name]);
  }
  return symbols.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}

function symbolize(symbols, address) {
  let lo = 0;
  let hi = symbols.length - 1;
  if (hi < 0 || address < symbols[0][0]) return `0x${address.toString(16)}`;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (symbols[mid][0] <= address) lo = mid;
    else hi = mid - 1;
  }
  return symbols[lo][1];
}

/** Sends monitor commands one at a time; resolves each with its output (up to the next prompt). */
function monitor(path) {
  const socket = net.connect(path);
  let buffer = '';
  let waiting = null;
  socket.setEncoding('latin1');
  socket.on('data', (chunk) => {
    buffer += chunk;
    const end = buffer.indexOf(PROMPT);
    if (end >= 0 && waiting) {
      const output = buffer.slice(0, end);
      buffer = buffer.slice(end + PROMPT.length);
      const resolve = waiting;
      waiting = null;
      resolve(output);
    }
  });
  const ready = new Promise((resolve, reject) => {
    waiting = resolve; // the banner, up to the first prompt
    socket.once('error', reject);
  });
  return {
    ready,
    command(text) {
      return new Promise((resolve) => {
        waiting = resolve;
        socket.write(`${text}\n`);
      });
    },
    close: () => socket.destroy(),
  };
}

async function sample(socketPath, samples) {
  const hmp = monitor(socketPath);
  await hmp.ready;
  for (let i = 0; i < samples; i++) {
    const output = await hmp.command('info registers -a');
    let cpu = -1;
    for (const line of output.split(/\r?\n/)) {
      const head = /^CPU#(\d+)/.exec(line);
      if (head) cpu = Number(head[1]);
      const rip = /^RIP=([0-9a-f]+) .*CPL=(\d).*HLT=(\d)/.exec(line);
      if (!rip || cpu < 0) continue;
      const entry = { cpu, rip: rip[1], cpl: Number(rip[2]), halted: rip[3] === '1' };
      process.stdout.write(`${JSON.stringify(entry)}\n`);
    }
    await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS));
  }
  hmp.close();
}

function print(samplesPath, kallsymsPath) {
  const symbols = kallsymsPath && fs.existsSync(kallsymsPath) ? readSymbols(kallsymsPath) : [];
  const counts = new Map(); // cpu -> Map(where -> samples)
  let total = 0;
  for (const line of fs.readFileSync(samplesPath, 'utf8').split('\n')) {
    if (!line) continue;
    const { cpu, rip, cpl, halted } = JSON.parse(line);
    let where;
    if (halted) where = 'halted (idle)';
    else if (cpl !== 0) where = 'user space';
    else where = `kernel ${symbolize(symbols, BigInt(`0x${rip}`))}`;
    const perCpu = counts.get(cpu) ?? new Map();
    perCpu.set(where, (perCpu.get(where) ?? 0) + 1);
    counts.set(cpu, perCpu);
    if (cpu === 0) total++;
  }
  if (counts.size === 0) {
    console.log("vCPU samples: none (QEMU's monitor did not answer)");
    return;
  }
  const named = symbols.length ? '' : ', kernel addresses unnamed: no copy of /proc/kallsyms';
  console.log(`vCPU samples (${total}, ${INTERVAL_MS} ms apart, from QEMU's monitor${named}):`);
  for (const [cpu, perCpu] of [...counts].sort((a, b) => a[0] - b[0])) {
    const parts = [...perCpu].sort((a, b) => b[1] - a[1]).map(([where, n]) => `${where} ${n}`);
    console.log(`  CPU#${cpu}: ${parts.join(', ')}`);
  }
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'sample') {
  sample(args[0], Number(args[1] ?? 20)).catch((error) => {
    console.error(`cpu-samples: QEMU's monitor: ${error.message}`);
  });
} else if (mode === 'print') {
  print(args[0], args[1]);
} else {
  console.error('usage: cpu-samples.js sample SOCKET SAMPLES | print FILE [KALLSYMS]');
  process.exit(2);
}
