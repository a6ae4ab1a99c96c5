/**
 * GET /api/docs: a viewer of this API's OpenAPI document (Swagger UI, from the swagger-ui-dist
 * package), one self-contained HTML page: the viewer's script and style are inlined from the
 * installed package, so the page loads nothing from any other origin (its Content-Security-Policy
 * forbids it) and works on a host without internet access.
 *
 * The page itself is public: it holds no data, only the viewer. It fetches the document from
 * /api/openapi.json, which needs a read token when tokens are configured; then it asks for the
 * token, keeps it in the tab's sessionStorage only, and hands it to the viewer's "Authorize" so
 * "Try it out" requests carry it too.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { RequestHandler } from 'express';

/** The page's own script: fetch the document (with the token once given) and start the viewer. */
const VIEWER_SCRIPT = `
(function () {
  var KEY = 'wg-peerd-token';
  var form = document.getElementById('token-form');
  var said = document.getElementById('token-said');
  function load() {
    var token = sessionStorage.getItem(KEY);
    var headers = token ? { Authorization: 'Bearer ' + token } : {};
    fetch('openapi.json', { headers: headers }).then(function (res) {
      if (res.status === 401 || res.status === 403) {
        form.hidden = false;
        said.textContent = token
          ? 'This token may not read the document (' + res.status + '): give a read or admin token.'
          : 'The daemon has tokens: give a read or admin token to see the document.';
        return null;
      }
      if (!res.ok) throw new Error('GET /api/openapi.json answered ' + res.status);
      return res.json();
    }).then(function (spec) {
      if (spec === null) return;
      form.hidden = true;
      var ui = SwaggerUIBundle({ spec: spec, dom_id: '#ui', deepLinking: true });
      if (token) ui.preauthorizeApiKey('bearer', token);
    }).catch(function (error) {
      said.textContent = String(error);
      form.hidden = false;
    });
  }
  form.addEventListener('submit', function (event) {
    event.preventDefault();
    sessionStorage.setItem(KEY, document.getElementById('token').value.trim());
    load();
  });
  load();
})();
`;

/** Inline script text must not close its element early: `</script` becomes `<\/script`. */
export function inlineScript(text: string): string {
  return text.replace(/<\/(script)/gi, '<\\/$1');
}

function sha256(text: string): string {
  return `'sha256-${createHash('sha256').update(text, 'utf8').digest('base64')}'`;
}

export interface DocsPage {
  html: string;
  contentSecurityPolicy: string;
}

/** Where the installed swagger-ui-dist keeps its files (a dependency of the package). */
export function swaggerUiDir(): string {
  return path.dirname(require.resolve('swagger-ui-dist/swagger-ui-bundle.js'));
}

/** Builds the page from the installed swagger-ui-dist (`dir`: its files). */
export function buildDocsPage(dir: string = swaggerUiDir()): DocsPage {
  const bundle = inlineScript(readFileSync(path.join(dir, 'swagger-ui-bundle.js'), 'utf8'));
  const css = readFileSync(path.join(dir, 'swagger-ui.css'), 'utf8').replace(
    /<\/(style)/gi,
    '<\\/$1',
  );
  const viewer = inlineScript(VIEWER_SCRIPT);
  const html = [
    '<!doctype html>',
    '<html lang="en">',
    '<head>',
    '<meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    '<title>wg-peerd API</title>',
    `<style>${css}</style>`,
    '</head>',
    '<body>',
    '<form id="token-form" hidden style="font-family: sans-serif; margin: 1em">',
    '<p id="token-said"></p>',
    '<label>Bearer token <input id="token" type="password" autocomplete="off" size="48"></label>',
    '<button type="submit">Show the API</button>',
    '</form>',
    '<div id="ui"></div>',
    `<script>${bundle}</script>`,
    `<script>${viewer}</script>`,
    '</body>',
    '</html>',
    '',
  ].join('\n');
  // Nothing from another origin: scripts only these two (by hash; Swagger UI's bundle keeps a
  // `new Function("return this")` fallback, hence unsafe-eval), styles inline (the viewer sets
  // them at run time), images as data: URLs, requests only to this daemon.
  const contentSecurityPolicy = [
    "default-src 'none'",
    `script-src ${sha256(bundle)} ${sha256(viewer)} 'unsafe-eval'`,
    "style-src 'unsafe-inline'",
    'img-src data:',
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
  return { html, contentSecurityPolicy };
}

/** The page is built on the first request (1.9 MB, read once) and then served from memory. */
export function serveDocs(build: () => DocsPage = buildDocsPage): RequestHandler {
  let page: DocsPage | null = null;
  return (_req, res) => {
    page ??= build();
    res
      .type('text/html; charset=utf-8')
      .set('Content-Security-Policy', page.contentSecurityPolicy)
      .set('X-Content-Type-Options', 'nosniff')
      .set('Cache-Control', 'no-cache')
      .send(page.html);
  };
}
