// Spend, as an admin watches it: today at a glance with the calls nobody
// could price marked apart (never drawn as $0), the attempts behind the
// numbers, and a halt that a person's next order meets as "spending is
// paused", with the credits given back.
const { test, expect } = require('@playwright/test');
const { signIn, shotsDir } = require('./session');
const fs = require('fs');
const path = require('path');

const SHOTS = shotsDir();
const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

const ADMIN = { email: 'admin@studio.test', password: 'admin password 123' };
const PAINTER = { email: 'painter@studio.test', password: 'painter password 1' };

async function clip(page, baseURL, key, model) {
  const r = await page.request.post('/v1/jobs', {
    headers: { Origin: baseURL, 'Idempotency-Key': key },
    data: { kind: 'video', prompt: 'a paper crane over a pond', model, duration_s: 2, resolution: '720p' },
  });
  expect(r.status()).toBe(201);
  return r.json();
}

async function settled(page, id) {
  await expect(async () => {
    const job = await (await page.request.get(`/v1/jobs/${id}`)).json();
    expect(['succeeded', 'failed', 'cancelled']).toContain(job.status);
  }).toPass({ timeout: 30_000 });
  return (await page.request.get(`/v1/jobs/${id}`)).json();
}

test.describe.serial('spend', () => {
  test('an admin sees today with unpriced calls apart, then the attempts behind them', async ({ page, baseURL }) => {
    await signIn(page, ADMIN);
    const me = await (await page.request.get('/v1/me')).json();
    const grant = await page.request.post(`/v1/users/${me.id}/credit-grants`, {
      headers: { Origin: baseURL, 'Idempotency-Key': 'spend-grant' },
      data: { amount: 20, reason: 'spend demo' },
    });
    expect(grant.status()).toBe(201);
    // Other specs may have left unpriced calls today: count from here.
    const today = new Date().toISOString().slice(0, 10);
    const before = (await (await page.request.get(`/v1/spend?from=${today}&to=${today}`)).json()).total.unpriced_attempts;
    const jobs = [
      await clip(page, baseURL, 'spend-priced', 'local-clip'),
      await clip(page, baseURL, 'spend-unpriced-1', 'local-unpriced'),
      await clip(page, baseURL, 'spend-unpriced-2', 'local-unpriced'),
    ];
    for (const j of jobs) expect((await settled(page, j.id)).status).toBe('succeeded');

    // The API counts the unpriced calls apart and never adds 0 for them.
    const spend = await (await page.request.get(`/v1/spend?from=${today}&to=${today}`)).json();
    const unpricedModel = spend.models.find((m) => m.model === 'local-unpriced');
    expect(unpricedModel.unpriced_attempts).toBe(2);
    expect(unpricedModel.priced_usd).toBe('0.000000');
    expect(spend.total.unpriced_attempts).toBeGreaterThanOrEqual(2);

    await page.goto('/admin');
    await expect(page.getByTestId('today')).toBeVisible();
    await expect(page.getByTestId('unpriced-today')).toContainText(String(before + 2));
    // The chart marks today's unpriced calls apart from the priced bars.
    await expect(page.getByTestId('chart')).toBeVisible();
    await expect(page.getByTestId('unpriced-mark').first()).toBeAttached();
    await expect(page.getByTestId('exposure')).toBeVisible();
    await shot(page, '30-admin-today');

    // Into the attempts: the unpriced ones only, each linked to its timeline.
    await page.getByTestId('unpriced-today').click();
    await expect(page).toHaveURL(/\/admin\/spend\?.*unpriced=1/);
    await expect(page.getByTestId('range-total')).toContainText('unpriced');
    const rows = page.getByTestId('attempt-row');
    await expect(rows).toHaveCount(before + 2);
    const ours = rows.filter({ hasText: 'local-unpriced' });
    await expect(ours).toHaveCount(2);
    await expect(ours.first()).toContainText('unpriced');
    await shot(page, '31-admin-spend-unpriced');
    // The CSV of the same range leaves an unpriced cost empty, never 0.
    const csvHref = await page.getByTestId('csv').getAttribute('href');
    const csv = await (await page.request.get(csvHref)).text();
    const lines = csv.trim().split('\n');
    expect(lines[0]).toBe('started_at,job_id,user,provider,model,attempt_no,state,error_class,cost_usd,cost_source');
    const unpricedLines = lines.filter((l) => l.includes('local-unpriced'));
    expect(unpricedLines.length).toBe(2);
    for (const l of unpricedLines) expect(l.split(',')[8]).toBe('');

    await ours.first().getByTestId('timeline-link').click();
    await expect(page.getByTestId('timeline')).toBeVisible();
  });

  test('spend by person and by token, the range marked, each share of the cap told once, and a forecast', async ({ page, playwright, baseURL }) => {
    await signIn(page, ADMIN);
    await page.goto('/account');
    await page.getByLabel('Token name').fill('nightly batch');
    await page.getByRole('button', { name: 'Create token' }).click();
    const secret = (await page.locator('#new-secret').textContent()).trim();
    const api = await playwright.request.newContext({ baseURL, extraHTTPHeaders: { authorization: `Bearer ${secret}` } });
    const r = await api.post('/v1/jobs', {
      headers: { 'Idempotency-Key': 'spend-by-token' },
      data: { kind: 'video', prompt: 'a lantern in the fog', model: 'local-clip', duration_s: 2, resolution: '720p' },
    });
    expect(r.status()).toBe(201);
    const job = await r.json();
    await api.dispose();
    expect((await settled(page, job.id)).status).toBe('succeeded');

    const today = new Date().toISOString().slice(0, 10);
    await page.goto(`/admin/spend?from=${today}&to=${today}`);
    const quick = page.getByRole('navigation', { name: 'Quick ranges' });
    await expect(quick.getByRole('link', { name: '1 day' })).toHaveAttribute('aria-current', 'page');
    await expect(quick.getByRole('link', { name: '7 days' })).not.toHaveAttribute('aria-current', /.*/);
    await expect(page.getByTestId('by-person')).toContainText(ADMIN.email);
    const byToken = page.getByTestId('by-token');
    await expect(byToken).toContainText('nightly batch');
    await expect(byToken).toContainText('From the pages');
    await shot(page, '35-spend-by-person-and-token');
    await page.getByTestId('by-person').getByRole('link', { name: ADMIN.email }).click();
    await expect(page).toHaveURL(/\/admin\/jobs\?user=/);

    // Today's cap lowered below what was spent: the overview says each
    // share was passed, once, and that the cap is reached.
    const day = await (await page.request.get(`/v1/budget/${today}`)).json();
    const lowered = await page.request.put(`/v1/budget/${today}`, {
      headers: { Origin: baseURL }, data: { cap_usd: '0.01' },
    });
    expect(lowered.status()).toBe(200);
    await page.goto('/admin');
    await expect(page.getByTestId('thresholds')).toContainText('50% at');
    await expect(page.getByTestId('thresholds')).toContainText('95% at');
    await expect(page.getByTestId('forecast')).toContainText('The cap is reached');
    await page.reload();
    expect((await page.getByTestId('thresholds').textContent()).match(/50% at/g)).toHaveLength(1);
    await shot(page, '36-admin-thresholds');
    const restored = await page.request.put(`/v1/budget/${today}`, {
      headers: { Origin: baseURL }, data: { cap_usd: day.cap_usd },
    });
    expect(restored.status()).toBe(200);
    await page.goto('/admin');
    await expect(page.getByTestId('forecast')).toContainText(/At today's rate so far|Nothing spent/);
  });

  test('a halted day stops the next paid call, and the person is told and refunded', async ({ page, browser, baseURL }) => {
    await signIn(page, ADMIN);
    await page.goto('/admin/budget');
    await shot(page, '32-admin-budget');
    await page.goto('/admin');
    await page.getByPlaceholder('Why halt today?').fill('the provider invoice looks wrong');
    await page.getByRole('button', { name: 'Halt today' }).click();
    await expect(page.getByTestId('halted')).toContainText('Spending is halted for today');
    await expect(page.getByTestId('halted')).toContainText('the provider invoice looks wrong');
    await expect(page.getByTestId('halted')).toContainText(ADMIN.email);
    await shot(page, '33-admin-halted');

    // A person orders a clip while the day is halted.
    const ctx = await browser.newContext();
    const painter = await ctx.newPage();
    await signIn(painter, PAINTER);
    const before = (await (await painter.request.get('/v1/credits')).json()).balance;
    const job = await clip(painter, baseURL, 'spend-while-halted', 'local-clip');
    const ended = await settled(painter, job.id);
    expect(ended.status).toBe('failed');
    expect(ended.error.code).toBe('SPENDING_PAUSED');
    const after = (await (await painter.request.get('/v1/credits')).json()).balance;
    expect(after).toBe(before);
    await painter.goto(`/edits/${job.id}`);
    await expect(painter.getByRole('alert')).toContainText('Spending is paused');
    await shot(painter, '34-edit-spending-paused');
    await ctx.close();

    // The budget page shows who halted it and why; resuming is recorded too.
    await page.goto('/admin/budget');
    await expect(page.getByTestId('history')).toContainText('the provider invoice looks wrong');
    await expect(page.getByTestId('history')).toContainText(ADMIN.email);
    await page.goto('/admin');
    await page.getByRole('button', { name: 'Resume today' }).click();
    await expect(page.getByTestId('halted')).toHaveCount(0);
  });
});
