// The API reference, as an integrator meets it: from the Account page where
// tokens are made, a page rendered from the OpenAPI document the server
// generates from its routes, with nothing fetched from elsewhere.
const { test, expect } = require('@playwright/test');
const { signIn, shotsDir } = require('./session');
const fs = require('fs');
const path = require('path');

const SHOTS = shotsDir();
const shot = (page, name, fullPage = false) =>
  page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage });

const ADMIN = { email: 'admin@studio.test', password: 'admin password 123' };

test('the API reference is one click from the tokens, and matches the document', async ({ page, baseURL }) => {
  const offsite = [];
  page.on('request', (r) => {
    if (!r.url().startsWith(baseURL)) offsite.push(r.url());
  });
  await signIn(page, ADMIN);

  await page.goto('/account');
  await page.getByRole('link', { name: 'Read the API reference' }).click();
  await expect(page).toHaveURL(/\/docs\/api$/);
  await expect(page.getByRole('heading', { name: 'Tollgate API reference' })).toBeVisible();
  await shot(page, '19-api-docs');

  // Every operation of the served document is on the page.
  const doc = await (await page.request.get('/v1/openapi.json')).json();
  for (const [p, item] of Object.entries(doc.paths)) {
    for (const op of Object.values(item)) {
      await expect(page.locator(`#op-${op.operationId}`)).toHaveCount(1);
    }
    expect(p.length).toBeGreaterThan(0);
  }
  // The contents lead to an operation, its links to the job's own paths.
  await page.locator('.api-contents a[href="#op-submit_job"]').click();
  const submit = page.locator('#op-submit_job');
  await expect(submit).toBeInViewport();
  await expect(submit).toContainText('Idempotency-Key');
  await expect(submit).toContainText('get_job');
  await submit.getByRole('link', { name: 'JobRequestBody' }).click();
  await expect(page.locator('#schema-JobRequestBody')).toBeInViewport();
  await shot(page, '20-api-docs-operation');
  // Each operation has a call to paste, the body made from the schema.
  await submit.getByTestId('example').locator('summary').click();
  const example = (await submit.getByTestId('example').locator('code').textContent());
  expect(example).toContain('curl -X POST "$TOLLGATE_URL/v1/jobs"');
  expect(example).toContain('Authorization: Bearer $TOLLGATE_TOKEN');
  expect(example).toContain('Idempotency-Key');
  const body = JSON.parse(example.match(/-d '(.*)'/s)[1]);
  expect(typeof body.kind).toBe('string');
  expect(offsite).toEqual([]);

  // Readable on a phone, and open without signing in.
  const phone = await page.context().browser().newContext({ viewport: { width: 390, height: 844 } });
  const p2 = await phone.newPage();
  await p2.goto(`${baseURL}/docs/api`);
  await expect(p2.getByRole('heading', { name: 'Tollgate API reference' })).toBeVisible();
  await p2.screenshot({ path: path.join(SHOTS, '21-api-docs-phone.png') });
  // Nothing on it scrolls the page sideways.
  const wide = await p2.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  expect(wide).toBeLessThanOrEqual(0);
  await phone.close();
});
