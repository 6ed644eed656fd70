// Charge once, as a person meets it: upload a photo, paint a mask, pick a
// medium, see the price, submit (twice, quickly), find the job in My edits
// and the debit on Credits, then cancel it and get the refund.
const { test, expect } = require('@playwright/test');
const { signIn, shotsDir } = require('./session');
const fs = require('fs');
const path = require('path');
const { makePng } = require('./png');

const SHOTS = shotsDir();
const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

const ADMIN = { email: 'admin@studio.test', password: 'admin password 123' };
const PAINTER = { email: 'painter@studio.test', password: 'painter password 1' };

test.describe.serial('charge once', () => {
  test('an admin sets up a painter with 20 credits', async ({ page }) => {
    await signIn(page, ADMIN);
    await page.goto('/admin/users');
    await page.getByLabel('Email', { exact: true }).fill(PAINTER.email);
    await page.getByLabel('Initial password').fill(PAINTER.password);
    await page.getByRole('button', { name: 'Add user' }).click();
    const row = page.locator(`tr[data-email="${PAINTER.email}"]`);
    await row.getByPlaceholder('Credits').fill('20');
    await row.getByRole('button', { name: 'Grant' }).click();
    await expect(page.getByRole('status')).toContainText(`Granted 20 credits to ${PAINTER.email}`);
  });

  test('upload, paint, choose, see the price, double-click submit: one job, one charge', async ({ page }) => {
    await signIn(page, PAINTER);
    await expect(page.getByText('No edits yet')).toBeVisible();
    await shot(page, '10-edits-empty');
    await page.getByRole('link', { name: 'Make your first edit' }).click();
    await expect(page).toHaveURL(/\/edits\/new$/);

    // The composer is an island: retry until it has woken up and taken the file.
    const photo = { name: 'dog.png', mimeType: 'image/png', buffer: makePng(480, 320) };
    await expect(async () => {
      await page.getByTestId('photo-input').setInputFiles(photo);
      await expect(page.getByAltText('Your photo')).toBeVisible({ timeout: 2000 });
    }).toPass({ timeout: 20_000 });

    await expect(page.getByTestId('price')).toHaveText('2 credits');
    await page.getByText('An area I paint').click();
    const canvas = page.getByTestId('mask-canvas');
    await expect(canvas).toBeVisible();
    await canvas.evaluate((el) => el.scrollIntoView({ block: 'start' }));
    await page.evaluate(() => window.scrollBy(0, -80));
    const box = await canvas.boundingBox();
    await page.mouse.move(box.x + box.width * 0.25, box.y + box.height * 0.55);
    await page.mouse.down();
    for (let i = 0; i <= 10; i++) {
      await page.mouse.move(box.x + box.width * (0.25 + i * 0.02), box.y + box.height * (0.55 + (i % 3) * 0.03));
    }
    await page.mouse.up();
    await expect(page.getByTestId('stroke-count')).toHaveText('1 stroke');

    await page.getByText('Origami', { exact: true }).click();
    await page.getByText('Strong', { exact: true }).click();
    await expect(page.getByTestId('price')).toHaveText('3 credits');
    await page.getByLabel('Describe it (optional)').fill('the dog on the left');
    await shot(page, '11-new-edit');

    await page.getByTestId('submit').dblclick();
    await expect(page).toHaveURL(/\/edits\/[0-9a-f-]{36}$/, { timeout: 20_000 });
    await expect(page.getByTestId('job-price')).toHaveText('3 credits');
    await expect(page.getByTestId('story')).toContainText('Ordered');
    // The edit runs on the local provider; the page follows it to the end.
    await expect(page.getByTestId('job-status')).toContainText('Done', { timeout: 30_000 });
    await expect(page.getByTestId('result-image')).toBeVisible();
    await expect(page.getByTestId('review')).toContainText('Review passed');
    await expect(page.getByTestId('attempts')).toContainText('by the price list');
    await shot(page, '12-edit-detail');

    await page.goto('/edits');
    await expect(page.getByTestId('job-card')).toHaveCount(1);
    await expect(page.getByTestId('job-card')).toContainText('Origami');
    await shot(page, '13-my-edits');

    await page.goto('/credits');
    await expect(page.getByTestId('balance')).toHaveText('17');
    await expect(page.getByTestId('ledger').getByTestId('job-ref')).toHaveCount(1);

    // The API agrees: one job, and its request carries the painted mask.
    const jobs = await (await page.request.get('/v1/jobs')).json();
    expect(jobs.data).toHaveLength(1);
    expect(jobs.data[0].request.target.kind).toBe('area');
    expect(jobs.data[0].request.target.mask).toMatch(/[0-9a-f-]{36}/);
    expect(jobs.data[0].request.style).toBe('origami');
  });

  test('a photo that is not ready fails with questions, and is refunded next to its job', async ({ page }) => {
    await signIn(page, PAINTER);
    await page.goto('/edits/new');
    // A photo with nothing to find: one flat colour.
    const flat = { name: 'wall.png', mimeType: 'image/png', buffer: makePng(200, 150, true) };
    await expect(async () => {
      await page.getByTestId('photo-input').setInputFiles(flat);
      await expect(page.getByAltText('Your photo')).toBeVisible({ timeout: 2000 });
    }).toPass({ timeout: 20_000 });
    await page.getByText('A person', { exact: true }).click();
    await page.getByTestId('submit').click();
    await expect(page).toHaveURL(/\/edits\/[0-9a-f-]{36}$/, { timeout: 20_000 });
    await expect(page.getByTestId('job-status')).toContainText('Failed', { timeout: 30_000 });
    await expect(page.getByText('Before we try again:')).toBeVisible();
    await shot(page, '15-not-ready');
    await page.goto('/credits');
    await expect(page.getByTestId('balance')).toHaveText('17');
    await expect(page.getByTestId('ledger').getByTestId('job-ref')).toHaveCount(3);
    await shot(page, '14-credits-refund');
  });

  test('an admin opens the job timeline', async ({ page }) => {
    await signIn(page, ADMIN);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Jobs' }).click();
    await expect(page).toHaveURL(/\/admin\/jobs$/);
    await expect(page.getByTestId('jobs')).toContainText(PAINTER.email);
    await shot(page, '16-admin-jobs');
    await page.getByTestId('count-failed').click();
    await expect(page.getByTestId('count-failed')).toHaveText('Failed 1');
    await expect(page.getByTestId('jobs').locator('tbody tr')).toHaveCount(1);
    await page.getByTestId('count-all').click();
    await page.getByTestId('jobs').getByRole('link', { name: /Origami/ }).click();
    await expect(page.getByTestId('timeline')).toContainText('Picked up by');
    await expect(page.getByTestId('timeline')).toContainText(/hold became spend/);
    await expect(page.getByTestId('attempts')).toContainText('local-edit');
    await shot(page, '17-admin-timeline');
  });

  test('another person cannot see the edit', async ({ page, browser }) => {
    await signIn(page, PAINTER);
    const jobs = await (await page.request.get('/v1/jobs')).json();
    const id = jobs.data[0].id;
    const context = await browser.newContext();
    const other = await context.newPage();
    await signIn(other, { email: 'maya@studio.test', password: 'maya password 123' });
    await other.goto(`/edits/${id}`);
    await expect(other.getByTestId('not-found')).toContainText('No such edit');
    expect((await other.request.get(`/v1/jobs/${id}`)).status()).toBe(404);
    await context.close();
  });
});
