// Every list reachable (issue 33): one person orders 250 clips whose
// provider loses each answer, so each parks for a reviewer and tells the
// person's webhook. Then every list that shows them pages to its end and
// back in Chromium, each page saying where it sits: My edits, Credits, the
// Account page's deliveries, the admin's Jobs, the review queue, the
// attempts on Spend and the admin's deliveries. Then every page, full of
// them, is opened at 1280 and 390 px, light and dark, as each role meets
// it: none scrolls sideways, and each is kept as a screenshot to look at.
// Runs last: it leaves 250 parked records behind.
const { test, expect } = require('@playwright/test');
const { signIn, shotsDir } = require('./session');
const http = require('http');
const fs = require('fs');
const path = require('path');

const SHOTS = shotsDir('sweep');

const ADMIN = { email: 'admin@studio.test', password: 'admin password 123' };
const MANY = { email: 'many@studio.test', password: 'many password 12' };
const JOBS = 250;

/** A receiver on loopback that answers 200 and counts what it gets. */
function receiver() {
  let got = 0;
  const server = http.createServer((req, res) => {
    req.on('data', () => {});
    req.on('end', () => { got += 1; res.writeHead(200); res.end('ok'); });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
    url: `http://127.0.0.1:${server.address().port}/hook`, got: () => got, close: () => server.close(),
  })));
}

/** How many of the caller's jobs are in `status`, counted over the API's pages. */
async function countJobs(request, status) {
  let n = 0;
  let cursor = '';
  for (;;) {
    const r = await request.get(`/v1/jobs?status=${status}&limit=100${cursor ? `&cursor=${cursor}` : ''}`);
    expect(r.status()).toBe(200);
    const body = await r.json();
    n += body.data.length;
    if (!body.next_cursor) return n;
    cursor = encodeURIComponent(body.next_cursor);
  }
}

/**
 * Opens `url` and pages to the list's end and back. Each page must say
 * "Showing a–b of N <noun>", continue where the last left off and show
 * b - a + 1 rows; the last page ends at N; back, each page is the one
 * seen going forward, until the first, which has no way back.
 */
async function walk(page, url, row, noun, least = JOBS) {
  await page.goto(url);
  const place = page.getByTestId('pager-place');
  const rows = page.getByTestId(row);
  const text = await place.innerText();
  const m = new RegExp(`^Showing 1–(\\d+) of (\\d+) ${noun}$`).exec(text);
  expect(m, `${url}: ${text}`).not.toBeNull();
  const total = Number(m[2]);
  expect(total).toBeGreaterThanOrEqual(least);
  const starts = [];
  let shown = 0;
  for (;;) {
    const at = new RegExp(`^Showing ${shown + 1}–(\\d+) of ${total} ${noun}$`);
    await expect(place).toHaveText(at);
    const end = Number(at.exec(await place.innerText())[1]);
    await expect(rows).toHaveCount(end - shown);
    starts.push(shown + 1);
    shown = end;
    if (shown === total) break;
    await page.getByTestId('pager-next').click();
  }
  await expect(page.getByTestId('pager-next')).toHaveCount(0);
  expect(starts.length).toBeGreaterThan(1);
  // And back, page by page, to the first.
  for (let i = starts.length - 2; i >= 0; i--) {
    await page.getByTestId('pager-prev').click();
    await expect(place).toHaveText(new RegExp(`^Showing ${starts[i]}–\\d+ of ${total} ${noun}$`));
  }
  await expect(page.getByTestId('pager-prev')).toHaveCount(0);
  return { total, pages: starts.length };
}

test.describe.serial('every list pages', () => {
  let hook;
  test.beforeAll(async () => { hook = await receiver(); });
  test.afterAll(() => hook.close());

  test(`a person orders ${JOBS} clips and each parks for a reviewer`, async ({ page, baseURL }) => {
    test.setTimeout(300_000);
    await signIn(page, ADMIN);
    await page.goto('/admin/users');
    await page.getByLabel('Email', { exact: true }).fill(MANY.email);
    await page.getByLabel('Initial password').fill(MANY.password);
    await page.getByRole('button', { name: 'Add user' }).click();
    const row = page.locator(`tr[data-email="${MANY.email}"]`);
    await row.getByPlaceholder('Credits').fill('5000');
    await row.getByRole('button', { name: 'Grant' }).click();
    await expect(page.getByRole('status')).toContainText(`Granted 5000 credits to ${MANY.email}`);

    await page.context().clearCookies();
    await signIn(page, MANY);
    const endpoint = await page.request.post('/v1/webhook-endpoints', {
      headers: { Origin: baseURL },
      data: { url: hook.url, events: ['generation.parked'] },
    });
    expect(endpoint.status()).toBe(201);
    for (let i = 0; i < JOBS; i++) {
      const r = await page.request.post('/v1/jobs', {
        headers: { Origin: baseURL, 'Idempotency-Key': `lists-${i}` },
        data: { kind: 'video', prompt: `a lantern number ${i}`, model: 'local-flaky', duration_s: 2, resolution: '720p' },
      });
      expect(r.status(), await r.text()).toBe(201);
    }
    await expect.poll(() => countJobs(page.request, 'parked'), { timeout: 180_000, intervals: [1000] }).toBe(JOBS);
    await expect.poll(() => hook.got(), { timeout: 120_000, intervals: [500] }).toBeGreaterThanOrEqual(JOBS);
  });

  test('the person pages their edits, credits and deliveries to the end and back', async ({ page }) => {
    test.setTimeout(180_000);
    await signIn(page, MANY);
    expect((await walk(page, '/edits', 'job-card', 'edits')).total).toBe(JOBS);
    // The grant and a charge per clip.
    expect((await walk(page, '/credits', 'entry-row', 'entries')).total).toBe(JOBS + 1);
    // Delivered while the test waited; a late retry would only add rows.
    await expect.poll(async () => {
      const r = await page.request.get('/v1/webhook-deliveries?state=delivered&limit=100');
      return (await r.json()).data.length;
    }).toBe(100);
    expect((await walk(page, '/account', 'delivery-row', 'deliveries')).total).toBe(JOBS);
    // Money in the words people use: "$0.04", not "$0.040000".
    const [job] = (await (await page.request.get('/v1/jobs?limit=1')).json()).data;
    await page.goto(`/edits/${job.id}`);
    await expect(page.locator('dt:has-text("Provider estimate") + dd')).toHaveText('$0.04');
  });

  test('an admin and a reviewer page jobs, the queue, attempts and deliveries to the end and back', async ({ page }) => {
    test.setTimeout(180_000);
    await signIn(page, ADMIN);
    const who = encodeURIComponent(MANY.email);
    expect((await walk(page, `/admin/jobs?user=${who}`, 'job-row', 'jobs')).total).toBe(JOBS);
    await walk(page, '/review', 'queue-row', 'records');
    await walk(page, '/admin/spend', 'attempt-row', 'attempts');
    // Days without calls are counted, not listed: today is the one row.
    await expect(page.getByTestId('quiet-days')).toHaveText(/^\d+ days? without calls (is|are) not listed\.$/);
    await expect(page.getByTestId('by-day').locator('tbody tr')).not.toHaveCount(0);
    await walk(page, '/admin/webhooks?state=delivered', 'delivery-row', 'deliveries');
  });

  test('every page fits a desktop and a phone, light and dark', async ({ browser, baseURL }) => {
    test.setTimeout(300_000);
    const ids = async (who, url) => {
      const context = await browser.newContext({ baseURL });
      const page = await context.newPage();
      await signIn(page, who);
      const body = await (await page.request.get(url)).json();
      await context.close();
      return body.data[0].id;
    };
    const job = await ids(MANY, '/v1/jobs?limit=1');
    const record = await ids(ADMIN, '/v1/parked?limit=1');
    const visits = [
      [null, ['/login', '/no-such-page']],
      [MANY, ['/edits', '/edits/new', `/edits/${job}`, '/credits', '/account', '/docs/api', '/admin']],
      [ADMIN, ['/admin', '/admin/spend', '/admin/budget', '/admin/jobs', '/admin/webhooks', '/admin/users',
        '/review', `/review/${record}`, `/edits/${job}`]],
    ];
    const wide = [];
    for (const [width, height] of [[1280, 900], [390, 844]]) {
      for (const colorScheme of ['light', 'dark']) {
        for (const [who, urls] of visits) {
          const context = await browser.newContext({ baseURL, viewport: { width, height }, colorScheme });
          const page = await context.newPage();
          if (who) await signIn(page, who);
          for (const url of urls) {
            await page.goto(url);
            await page.waitForLoadState('networkidle');
            const scroll = await page.evaluate(() => document.documentElement.scrollWidth);
            if (scroll > width) wide.push(`${url} as ${who ? who.email : 'nobody'} at ${width} ${colorScheme}: ${scroll}px`);
            const name = `${who ? who.email.split('@')[0] : 'nobody'}${url.replace(/[^a-z0-9]+/gi, '-')}-${width}-${colorScheme}`;
            // The top of the page, as tall as a person reads before scrolling far.
            const tall = Math.min(await page.evaluate(() => document.documentElement.scrollHeight), 2400);
            await page.screenshot({
              path: path.join(SHOTS, `${name.slice(0, 80)}.png`), fullPage: true, clip: { x: 0, y: 0, width, height: tall },
            });
          }
          await context.close();
        }
      }
    }
    expect(wide).toEqual([]);
  });
});
