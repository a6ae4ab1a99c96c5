// Mocha reporter: the Spec reporter's console output, plus a machine-readable summary.
//
// On the end of the run it writes {"passed":N,"failed":N,"skipped":N} to the file named by the
// environment variable MOCHA_SUMMARY_FILE, when that is set. "failed" counts failed tests and
// failed hooks (mocha's own failure count, which is also its exit status); "skipped" counts
// pending tests (it.skip, this.skip(), tests without a body); "failures" lists the full titles of
// what failed, so scripts/vm/test-kernel.sh can say which kernel each failure was on; "node" is
// the Node.js version the tests ran on (.ci/run runs them on 20, 22 and 24 and says which ran).
// .ci/run sums these files.
//
// MOCHA_PROGRESS_FILE, when set, is rewritten as the run goes (at each test and hook start and
// each result) with the same counts so far plus "running": the full title of the test or hook
// under way, or null, and "last": the last one that started. A run that never ends (a VM killed for its time) leaves there what failed
// before it stopped and where it stopped; scripts/vm/test-kernel.sh reads it then.
//
// Plain CommonJS (not compiled), so mocha can load it by path: --reporter test/support/reporter.js
'use strict';

/* global require, module, process */
/* eslint-disable @typescript-eslint/no-require-imports */
const fs = require('fs');
const path = require('path');
const Mocha = require('mocha');

const { Spec } = Mocha.reporters;
const {
  EVENT_HOOK_BEGIN,
  EVENT_HOOK_END,
  EVENT_RUN_END,
  EVENT_TEST_BEGIN,
  EVENT_TEST_END,
  EVENT_TEST_FAIL,
  EVENT_TEST_PASS,
  EVENT_TEST_PENDING,
} = Mocha.Runner.constants;

/** Writes `data` as JSON to `file` in one piece (a reader never sees half a file). */
function writeJson(file, data) {
  fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
  fs.writeFileSync(`${file}.tmp`, `${JSON.stringify(data)}\n`);
  fs.renameSync(`${file}.tmp`, file);
}

class SummaryReporter extends Spec {
  constructor(runner, options) {
    super(runner, options);
    const failures = [];
    // WG_PEERD_TEST_KERNEL (set by test-kernel.sh in the VM) names the kernel a failure was on.
    const kernel = process.env.WG_PEERD_TEST_KERNEL;
    const summary = () => {
      const stats = runner.stats || this.stats;
      return {
        passed: stats.passes,
        failed: stats.failures,
        skipped: stats.pending,
        failures,
        node: process.version,
      };
    };
    runner.on(EVENT_TEST_FAIL, (test) =>
      failures.push(kernel ? `[${kernel}] ${test.fullTitle()}` : test.fullTitle()),
    );
    const progressFile = process.env.MOCHA_PROGRESS_FILE;
    if (progressFile) {
      // Registered after the Spec reporter's and the stats' own listeners: the counts are current.
      // "last" is the last test or hook that started, which places a stop between two of them.
      let last = null;
      const progress = (running) => writeJson(progressFile, { ...summary(), running, last });
      for (const event of [EVENT_TEST_BEGIN, EVENT_HOOK_BEGIN]) {
        runner.on(event, (runnable) => progress((last = runnable.fullTitle())));
      }
      const ends = [EVENT_TEST_PASS, EVENT_TEST_FAIL, EVENT_TEST_PENDING, EVENT_TEST_END];
      for (const event of [...ends, EVENT_HOOK_END]) runner.on(event, () => progress(null));
    }
    runner.once(EVENT_RUN_END, () => {
      const file = process.env.MOCHA_SUMMARY_FILE;
      if (file) writeJson(file, summary());
    });
  }
}

module.exports = SummaryReporter;
