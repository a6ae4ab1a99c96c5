/**
 * Reads the PromQL of contrib/grafana/wg-peerd.json: each panel target's expression, and the
 * Grafana variables filled in as Grafana would for one job and instance.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';

export const DASHBOARD_FILE = path.resolve(
  __dirname,
  '..',
  '..',
  '..',
  'contrib',
  'grafana',
  'wg-peerd.json',
);

export interface DashboardTarget {
  panel: string;
  refId: string;
  expr: string;
}

interface Panel {
  type?: string;
  title?: string;
  panels?: Panel[];
  targets?: Array<{ expr?: unknown; refId?: unknown }>;
}

export interface Dashboard {
  panels: Panel[];
  templating: { list: Array<{ name: string; type: string; definition?: string }> };
}

export function readDashboard(): Dashboard {
  return JSON.parse(readFileSync(DASHBOARD_FILE, 'utf8')) as Dashboard;
}

/** Every panel but rows, rows' own panels included. */
export function panelsOf(dashboard: Dashboard): Panel[] {
  return dashboard.panels.flatMap((p) => (p.type === 'row' ? (p.panels ?? []) : [p]));
}

export function targetsOf(dashboard: Dashboard): DashboardTarget[] {
  return panelsOf(dashboard).flatMap((panel) =>
    (panel.targets ?? []).map((t) => ({
      panel: panel.title ?? '(untitled)',
      refId: String(t.refId),
      expr: typeof t.expr === 'string' ? t.expr : '',
    })),
  );
}

/** The values of the dashboard's variables for one scraped target. */
export interface Variables {
  job: string;
  /** A regular expression, as Grafana writes a multi-value or "All" selection. */
  instance: string;
  /** What Grafana computes from the scrape interval and the step. */
  rateInterval: string;
}

/** The expression with `$job`, `$instance` and `$__rate_interval` filled in; others throw. */
export function fillVariables(expr: string, vars: Variables): string {
  const filled = expr
    .replaceAll('$__rate_interval', vars.rateInterval)
    .replace(/\$\{?job\}?/g, vars.job)
    .replace(/\$\{?instance\}?/g, vars.instance);
  if (filled.includes('$')) throw new Error(`an unknown variable in: ${expr}`);
  return filled;
}
