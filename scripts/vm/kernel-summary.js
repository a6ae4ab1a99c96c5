#!/usr/bin/env node
// The kernel suite's summaries, for scripts/vm/test-kernel.sh (plain Node, no build needed).
//
//   node kernel-summary.js stopped PROGRESS KERNEL RUN STATUS TIMEOUT
//       The summary of VM run number RUN that wrote no summary (it did not reach the end of the suite),
//       from mocha's progress file PROGRESS (test/support/reporter.js: MOCHA_PROGRESS_FILE; may be
//       missing): what passed, failed and was skipped before it stopped, plus one failure naming
//       where it stopped and why (STATUS 124: the VM ran out of time, TIMEOUT saying its bounds, 125: the guest
//       reported no status, else the status mocha ended with), also listed under "unfinished".
//   node kernel-summary.js merge SUMMARY...
//       One kernel's summary from its runs in order (a run that did not reach the end, then its
//       rerun): the counts of the last run, plus every earlier failure it does not repeat, and
//       every run's "unfinished" line. A hang is thus never made good by a green rerun, and what
//       failed before it is kept.
//   node kernel-summary.js total DIR KERNEL|VERSION|SECONDS...
//       The sum over the kernels of DIR/<kernel>/mocha-summary.json on stdout (counts, failures,
//       unfinished), and one line per kernel with its counts and what failed on stderr.
//
// A summary is {"passed":N,"failed":N,"skipped":N,"failures":[title...],"unfinished":[line...]};
// "unfinished" is absent when every run reached its end.
'use strict';

/* global require, process, console */
/* eslint-disable @typescript-eslint/no-require-imports */
const fs = require('fs');

function readJson(file) {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

function stopped(progressFile, kernel, run, status, timeout) {
  let progress = { passed: 0, failed: 0, skipped: 0, failures: [], running: null, last: null };
  if (fs.existsSync(progressFile)) progress = readJson(progressFile);
  const why =
    status === '124'
      ? `the VM ran out of time (${timeout})`
      : status === '125'
        ? 'the VM stopped without reporting a status'
        : `mocha ended with status ${status} and wrote no summary`;
  const where = progress.running
    ? `in: ${progress.running}`
    : progress.last
      ? `after: ${progress.last}`
      : 'before the first test';
  const line = `[${kernel}] VM run ${run} did not reach the end of the suite: ${why}, ${where}`;
  return {
    passed: progress.passed,
    failed: progress.failed + 1,
    skipped: progress.skipped,
    failures: [...(progress.failures ?? []), line],
    unfinished: [line],
  };
}

function merge(summaries) {
  const last = summaries[summaries.length - 1];
  const failures = [...(last.failures ?? [])];
  const earlier = [];
  for (const summary of summaries.slice(0, -1)) {
    for (const title of summary.failures ?? []) {
      if (!failures.includes(title) && !earlier.includes(title)) earlier.push(title);
    }
  }
  const unfinished = summaries.flatMap((s) => s.unfinished ?? []);
  return {
    passed: last.passed,
    failed: last.failed + earlier.length,
    skipped: last.skipped,
    failures: [...earlier, ...failures],
    ...(unfinished.length > 0 ? { unfinished } : {}),
  };
}

function total(dir, rows) {
  const sum = { passed: 0, failed: 0, skipped: 0, failures: [], unfinished: [] };
  for (const row of rows) {
    const [kernel, version, seconds] = row.split('|');
    const s = readJson(`${dir}/${kernel}/mocha-summary.json`);
    for (const key of ['passed', 'failed', 'skipped']) sum[key] += s[key];
    sum.failures.push(...(s.failures ?? []));
    sum.unfinished.push(...(s.unfinished ?? []));
    console.error(
      `test:kernel: kernel ${version} (${kernel}): ${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped in ${seconds} s`,
    );
    for (const title of s.failures ?? []) console.error(`test:kernel:   failed: ${title}`);
  }
  if (sum.unfinished.length === 0) delete sum.unfinished;
  return sum;
}

const [command, ...args] = process.argv.slice(2);
let result;
if (command === 'stopped' && args.length === 5) result = stopped(...args);
else if (command === 'merge' && args.length > 0) result = merge(args.map(readJson));
else if (command === 'total' && args.length > 0) result = total(args[0], args.slice(1));
else {
  console.error('usage: kernel-summary.js stopped|merge|total ... (see its header)');
  process.exit(2);
}
console.log(JSON.stringify(result));
