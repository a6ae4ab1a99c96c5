// Mocha reporter: the Spec reporter's console output, plus a machine-readable summary.
//
// On the end of the run it writes {"passed":N,"failed":N,"skipped":N} to the file named by the
// environment variable MOCHA_SUMMARY_FILE, when that is set. "failed" counts failed tests and
// failed hooks (mocha's own failure count, which is also its exit status); "skipped" counts
// pending tests (it.skip, this.skip(), tests without a body); "failures" lists the full titles of
// what failed, so scripts/vm/test-kernel.sh can say which kernel each failure was on. .ci/run sums
// these files.
//
// Plain CommonJS (not compiled), so mocha can load it by path: --reporter test/support/reporter.js
'use strict';

/* global require, module, process */
/* eslint-disable @typescript-eslint/no-require-imports */
const fs = require('fs');
const path = require('path');
const Mocha = require('mocha');

const { Spec } = Mocha.reporters;
const { EVENT_RUN_END, EVENT_TEST_FAIL } = Mocha.Runner.constants;

class SummaryReporter extends Spec {
  constructor(runner, options) {
    super(runner, options);
    const failures = [];
    // WG_PEERD_TEST_KERNEL (set by test-kernel.sh in the VM) names the kernel a failure was on.
    const kernel = process.env.WG_PEERD_TEST_KERNEL;
    runner.on(EVENT_TEST_FAIL, (test) =>
      failures.push(kernel ? `[${kernel}] ${test.fullTitle()}` : test.fullTitle()),
    );
    runner.once(EVENT_RUN_END, () => {
      const file = process.env.MOCHA_SUMMARY_FILE;
      if (!file) return;
      const stats = runner.stats || this.stats;
      const summary = {
        passed: stats.passes,
        failed: stats.failures,
        skipped: stats.pending,
        failures,
      };
      fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true });
      fs.writeFileSync(file, `${JSON.stringify(summary)}\n`);
    });
  }
}

module.exports = SummaryReporter;
