import { expect } from 'chai';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Script } from 'node:vm';
import { buildDocsPage, inlineScript, swaggerUiDir } from '../../../src/http/docs';
import { openApiDocument } from '../../../src/http/openapi';
import { routeById } from '../../../src/http/routes';
import { setup } from './helpers';

const TOKEN = 'a-long-random-token-0123456789';

/** The text of every <script> element of the page, in order. */
function scriptsOf(html: string): string[] {
  return [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => m[1]!);
}

// Issue 21: the OpenAPI document with a viewer page at /api/docs, no external CDN: everything
// served from the package.
describe('GET /api/docs (the API viewer)', function () {
  this.timeout(20_000);

  it('answers an HTML page holding Swagger UI of the installed swagger-ui-dist', async () => {
    const res = await setup().http.get('/api/docs');
    expect(res.status).to.equal(200);
    expect(res.headers['content-type']).to.equal('text/html; charset=utf-8');
    const bundle = readFileSync(path.join(swaggerUiDir(), 'swagger-ui-bundle.js'), 'utf8');
    const [inlined] = scriptsOf(res.text);
    expect(inlined).to.equal(inlineScript(bundle));
    expect(res.text).to.contain('<title>wg-peerd API</title>');
  });

  it('loads nothing from another origin: no URL in an attribute, a policy allowing none', async () => {
    const res = await setup().http.get('/api/docs');
    // No element of the page points anywhere (no src=, href= or url( outside the scripts).
    const markup = res.text
      .replace(/<script>[\s\S]*?<\/script>/g, '')
      .replace(/<style>[\s\S]*?<\/style>/g, '');
    expect(markup).to.not.match(/\b(src|href)\s*=/i);
    const policy = String(res.headers['content-security-policy']);
    expect(policy).to.contain("default-src 'none'");
    expect(policy).to.contain("connect-src 'self'");
    expect(policy).to.not.match(/https?:|\*/);
    // Each inline script is allowed by its own hash and by nothing broader.
    for (const script of scriptsOf(res.text)) {
      const hash = createHash('sha256').update(script, 'utf8').digest('base64');
      expect(policy).to.contain(`'sha256-${hash}'`);
    }
    expect(policy).to.not.contain("'unsafe-inline' 'sha");
    expect(/script-src ([^;]*)/.exec(policy)![1]).to.not.contain('unsafe-inline');
  });

  it('carries scripts a browser can parse: the bundle and the viewer compile', async () => {
    const res = await setup().http.get('/api/docs');
    const scripts = scriptsOf(res.text);
    expect(scripts).to.have.length(2);
    for (const script of scripts) expect(() => new Script(script)).to.not.throw();
    // The viewer fetches the document next to it and starts the bundle's SwaggerUIBundle.
    expect(scripts[1]).to.contain("fetch('openapi.json'").and.contain('SwaggerUIBundle(');
    expect(scripts[0]).to.contain('SwaggerUIBundle');
  });

  it('needs no token (it holds no data), while the document it shows still does', async () => {
    const { http } = setup({ token: TOKEN });
    expect((await http.get('/api/docs')).status).to.equal(200);
    expect((await http.get('/api/openapi.json')).status).to.equal(401);
    const document = await http.get('/api/openapi.json').set('Authorization', `Bearer ${TOKEN}`);
    expect(document.status).to.equal(200);
  });

  it('is a public GET of the route table and of the OpenAPI document', () => {
    const def = routeById('docs');
    expect(def).to.include({ method: 'get', openapiPath: '/api/docs', scope: 'public' });
    const doc = openApiDocument({ version: 'test' }) as {
      paths: Record<string, Record<string, { responses: Record<string, { content: object }> }>>;
    };
    const operation = doc.paths['/api/docs']!['get']!;
    expect(operation.responses['200']!.content).to.have.property('text/html');
    expect(operation).to.have.deep.property('security', []);
  });

  it('keeps an inline script from closing its element early', () => {
    expect(inlineScript('a = "</script><script>alert(1)</SCRIPT>"')).to.equal(
      'a = "<\\/script><script>alert(1)<\\/SCRIPT>"',
    );
    const page = buildDocsPage();
    expect(scriptsOf(page.html).join('')).to.not.match(/<\/script/i);
  });
});
