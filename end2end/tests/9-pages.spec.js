// Every list reachable: a person with more edits than a page holds pages to
// the oldest and back, with the cursor in the URL and the page saying where
// it sits ("Showing 25–28 of 28 edits"), on a desktop and on a phone.
const { test, expect } = require('@playwright/test');
const { signIn, shotsDir } = require('./session');
const fs = require('fs');
const path = require('path');

const SHOTS = shotsDir();
const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

const ADMIN = { email: 'admin@studio.test', password: 'admin password 123' };
const LISTER = { email: 'lister@studio.test', password: 'lister password 1' };
// One more than a page of /edits (24) holds, and within a person's burst.
const EDITS = 28;

test.describe.serial('pages', () => {
  test('an admin sets up a person with credits', async ({ page }) => {
    await signIn(page, ADMIN);
    await page.goto('/admin/users');
    await page.getByLabel('Email', { exact: true }).fill(LISTER.email);
    await page.getByLabel('Initial password').fill(LISTER.password);
    await page.getByRole('button', { name: 'Add user' }).click();
    const row = page.locator(`tr[data-email="${LISTER.email}"]`);
    await row.getByPlaceholder('Credits').fill('1000');
    await row.getByRole('button', { name: 'Grant' }).click();
    await expect(page.getByRole('status')).toContainText(`Granted 1000 credits to ${LISTER.email}`);
  });

  test('My edits pages to the oldest edit and back', async ({ page, baseURL }) => {
    await signIn(page, LISTER);
    const made = [];
    for (let i = 0; i < EDITS; i++) {
      const r = await page.request.post('/v1/jobs', {
        headers: { Origin: baseURL, 'Idempotency-Key': `pages-${i}` },
        data: { kind: 'video', prompt: `a paper boat number ${i}`, model: 'local-clip', duration_s: 2, resolution: '720p' },
      });
      expect(r.status()).toBe(201);
      made.push((await r.json()).id);
    }
    await page.goto('/edits');
    const cards = page.getByTestId('job-card');
    await expect(cards).toHaveCount(24);
    await expect(page.getByTestId('pager-place')).toHaveText(`Showing 1–24 of ${EDITS} edits`);
    // Newest first: the last made leads the first page.
    await expect(cards.first()).toHaveAttribute('href', `/edits/${made[EDITS - 1]}`);
    await expect(page.getByTestId('pager-prev')).toHaveCount(0);

    await page.getByTestId('pager-next').click();
    await expect(page).toHaveURL(/\/edits\?cursor=/);
    await expect(cards).toHaveCount(EDITS - 24);
    await expect(page.getByTestId('pager-place')).toHaveText(`Showing 25–${EDITS} of ${EDITS} edits`);
    await expect(cards.last()).toHaveAttribute('href', `/edits/${made[0]}`);
    await expect(page.getByTestId('pager-next')).toHaveCount(0);
    await shot(page, '90-edits-last-page');

    // The URL is the page: reloading it shows the same page.
    await page.reload();
    await expect(cards).toHaveCount(EDITS - 24);

    await page.getByTestId('pager-prev').click();
    await expect(cards).toHaveCount(24);
    await expect(page.getByTestId('pager-place')).toHaveText(`Showing 1–24 of ${EDITS} edits`);
    await expect(cards.first()).toHaveAttribute('href', `/edits/${made[EDITS - 1]}`);
  });

  test('on a phone the pager fits the screen', async ({ page }) => {
    await page.setViewportSize({ width: 390, height: 844 });
    await signIn(page, LISTER);
    await page.goto('/edits');
    await expect(page.getByTestId('pager-next')).toBeVisible();
    const wide = await page.evaluate(() => document.documentElement.scrollWidth);
    expect(wide).toBeLessThanOrEqual(390);
    await shot(page, '91-edits-pager-phone');
  });

  test('a bad cursor is a clear error', async ({ page }) => {
    await signIn(page, LISTER);
    await page.goto('/edits?cursor=not-a-cursor');
    await expect(page.getByRole('alert')).toContainText('cursor');
  });
});
