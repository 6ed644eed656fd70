// What people meet day to day (issue 33): a forgotten password set anew by
// an admin, an order the composer says will fail before the click, credits
// that name the edits they paid for and page, a 404 for an edit that is not
// there, and the staff timeline in words with what was recorded behind a
// toggle.
const { test, expect } = require('@playwright/test');
const { signIn, shotsDir } = require('./session');
const fs = require('fs');
const path = require('path');

const SHOTS = shotsDir();
const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

const ADMIN = { email: 'admin@studio.test', password: 'admin password 123' };
const FORGETFUL = { email: 'forgetful@studio.test', password: 'first password 1' };
const BROKE = { email: 'broke@studio.test', password: 'broke password 1' };
const RENEWED = 'a brand new password';

async function addPerson(page, who, credits) {
  await page.goto('/admin/users');
  await page.getByLabel('Email', { exact: true }).fill(who.email);
  await page.getByLabel('Initial password').fill(who.password);
  await page.getByRole('button', { name: 'Add user' }).click();
  await expect(page.getByRole('status')).toContainText(`Added ${who.email}`);
  if (credits) {
    const row = page.locator(`tr[data-email="${who.email}"]`);
    await row.getByPlaceholder('Credits').fill(String(credits));
    await row.getByRole('button', { name: 'Grant' }).click();
    await expect(page.getByRole('status')).toContainText(`Granted ${credits} credits`);
  }
}

async function noSidewaysScroll(page) {
  const wide = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  expect(wide).toBeLessThanOrEqual(0);
}

test.describe.serial('people', () => {
  test('an admin sets a new password for someone who forgot theirs', async ({ page, browser }) => {
    await signIn(page, ADMIN);
    await addPerson(page, FORGETFUL, 100);
    await addPerson(page, BROKE, 0);

    // Their session from before the reset ends.
    const theirs = await browser.newContext();
    const before = await theirs.newPage();
    await signIn(before, FORGETFUL);

    const row = page.locator(`tr[data-email="${FORGETFUL.email}"]`);
    await row.getByTestId('set-password').locator('summary').click();
    await row.getByLabel('New password').fill(RENEWED);
    await row.getByLabel('Confirm').fill(RENEWED);
    await shot(page, '100-admin-set-password');
    await row.getByRole('button', { name: 'Set password' }).click();
    await expect(page.getByRole('status')).toContainText(`New password set for ${FORGETFUL.email}`);
    // An admin's own row has no such form: they use the Account page.
    await expect(page.locator(`tr[data-email="${ADMIN.email}"]`).getByTestId('set-password')).toHaveCount(0);

    await before.goto('/edits');
    await expect(before).toHaveURL(/\/login/);
    await signIn(before, { email: FORGETFUL.email, password: FORGETFUL.password }, { landing: null });
    await expect(before.getByRole('alert')).toBeVisible();
    await signIn(before, { email: FORGETFUL.email, password: RENEWED });
    await theirs.close();
  });

  test('the composer says before the click that an order would fail', async ({ page }) => {
    await signIn(page, BROKE);
    await page.goto('/edits/new');
    const blocker = page.getByTestId('order-blocker');
    await expect(blocker).toContainText('Upload a photo');
    await expect(page.getByTestId('submit')).toBeDisabled();
    await page.getByTestId('photo-input').setInputFiles(path.join(__dirname, '..', '..', 'tests', 'photos', 'dog_corgi.jpg'));
    await expect(blocker).toContainText('Ask your admin for credits');
    await expect(blocker).not.toContainText('Upload a photo');
    await expect(page.getByTestId('submit')).toBeDisabled();
    await shot(page, '101-composer-no-credits');
  });

  test('credits name the edit each charge was for, and fit a phone', async ({ page, baseURL }) => {
    await signIn(page, { email: FORGETFUL.email, password: RENEWED });
    const r = await page.request.post('/v1/jobs', {
      headers: { Origin: baseURL, 'Idempotency-Key': 'people-clip' },
      data: { kind: 'video', prompt: 'a lantern on a jetty', model: 'local-clip', duration_s: 2, resolution: '720p' },
    });
    expect(r.status()).toBe(201);
    const job = await r.json();
    await page.goto('/credits');
    const ledger = page.getByTestId('ledger');
    await expect(ledger.getByTestId('job-ref')).toHaveText('Video · 2 s 720p');
    await expect(ledger.getByTestId('job-ref')).toHaveAttribute('href', `/edits/${job.id}`);
    // The stored reference is there for who needs it, folded away.
    await expect(ledger.getByText(`debit:job:${job.id}`)).toBeHidden();
    await ledger.getByText('Reference').first().click();
    await expect(ledger.getByText(`debit:job:${job.id}`)).toBeVisible();
    await page.setViewportSize({ width: 390, height: 844 });
    await page.reload();
    await noSidewaysScroll(page);
    await shot(page, '102-credits-phone');
  });

  test('an edit that is not there is a 404 page', async ({ page }) => {
    await signIn(page, { email: FORGETFUL.email, password: RENEWED });
    const response = await page.goto('/edits/00000000-0000-4000-8000-000000000000');
    expect(response.status()).toBe(404);
    await expect(page.getByTestId('not-found')).toContainText('No such edit');
    await expect(page.getByRole('link', { name: 'Go to My edits' })).toBeVisible();
  });

  test('staff read the timeline in words, with what was recorded behind a toggle', async ({ page, browser, baseURL }) => {
    // A person orders; an admin reads what happened to it.
    const owner = await browser.newPage();
    await signIn(owner, { email: FORGETFUL.email, password: RENEWED });
    const r = await owner.request.post('/v1/jobs', {
      headers: { Origin: baseURL, 'Idempotency-Key': 'people-owner-clip' },
      data: { kind: 'video', prompt: 'a kettle on a stove', model: 'local-clip', duration_s: 2, resolution: '720p' },
    });
    expect(r.status()).toBe(201);
    const job = await r.json();
    await owner.close();
    await signIn(page, ADMIN, { landing: null });
    await page.goto(`/edits/${job.id}`);
    await expect(page.getByTestId('job-status')).toContainText('Done', { timeout: 30_000 });
    await page.reload();
    const timeline = page.getByTestId('timeline');
    await expect(timeline).toContainText('Ordered: ');
    await expect(timeline).toContainText('Attempt 1 began');
    await expect(timeline).not.toContainText('attempt_ended');
    await expect(page.getByTestId('recorded')).not.toHaveAttribute('open', /.*/);
    await page.getByTestId('recorded').locator('summary').click();
    await expect(page.getByTestId('recorded')).toContainText('attempt_ended');
    await shot(page, '103-staff-timeline');
  });

  test('admin Jobs counts each status, filters by person, finds by id, and cancels', async ({ page, browser, baseURL }) => {
    // A person's clip gets stuck; an admin finds it and cancels it.
    const owner = await browser.newPage();
    await signIn(owner, { email: FORGETFUL.email, password: RENEWED });
    const r = await owner.request.post('/v1/jobs', {
      headers: { Origin: baseURL, 'Idempotency-Key': 'people-owner-flaky' },
      data: { kind: 'video', prompt: 'a heron in the rain', model: 'local-flaky', duration_s: 2, resolution: '720p' },
    });
    expect(r.status()).toBe(201);
    const stuck = await r.json();
    await owner.close();
    await signIn(page, ADMIN);
    await page.goto(`/edits/${stuck.id}`);
    await expect(page.getByTestId('job-status')).toContainText('Needs review', { timeout: 30_000 });

    await page.goto('/admin/jobs');
    await expect(page.getByTestId('count-parked')).toContainText(/Needs review \d+/);
    await expect(page.getByTestId('count-succeeded')).toBeVisible();
    await expect(page.getByTestId('job-cost').first()).toBeVisible();
    await shot(page, '104-admin-jobs');

    // One person's jobs, the filter in the address.
    await page.getByLabel('Person').fill(FORGETFUL.email);
    await page.getByRole('button', { name: 'Search' }).click();
    await expect(page).toHaveURL(/user=forgetful%40studio\.test/);
    const theirs = page.getByTestId('job-row');
    await expect(theirs.first()).toBeVisible();
    for (const row of await theirs.all()) await expect(row).toContainText(FORGETFUL.email);
    await expect(page.getByTestId('count-all')).toHaveText(`All ${await theirs.count()}`);

    // Found by id.
    await page.goto(`/admin/jobs?find=${stuck.id}`);
    await expect(page.getByTestId('found')).toBeVisible();
    await expect(page.getByTestId('job-row')).toHaveCount(1);
    await page.getByTestId('job-row').getByRole('button', { name: 'Cancel and refund' }).click();
    await expect(page.getByTestId('job-status')).toContainText('Cancelled');
    // The cancel leaves the parked record for a reviewer: settle it.
    await page.goto(`/edits/${stuck.id}`);
    await page.getByRole('link', { name: 'Open the record' }).click();
    const accept = page.getByTestId('action-accept_failure');
    await accept.getByLabel('Keep the hold booked at the estimate').check();
    await accept.getByLabel('Evidence (required)').fill('The lost call was billed; the owner had cancelled.');
    await accept.getByRole('button', { name: 'Accept the failure' }).click();
    await expect(page.getByTestId('record-state')).toContainText('Closed');
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto('/admin/jobs');
    await noSidewaysScroll(page);
    await shot(page, '105-admin-jobs-phone');
  });

  test('an admin starts on the overview, and their menu is one line at 1280 px', async ({ page }) => {
    await page.setViewportSize({ width: 1280, height: 800 });
    await signIn(page, ADMIN, { landing: /\/admin$/ });
    const tops = await page.getByRole('navigation', { name: 'Main' }).getByRole('link')
      .evaluateAll((links) => links.map((l) => Math.round(l.getBoundingClientRect().top)));
    expect(tops.length).toBe(8);
    expect(new Set(tops).size).toBe(1);
    await page.getByRole('link', { name: 'Tollgate', exact: true }).click();
    await expect(page).toHaveURL(/\/admin$/);
    await shot(page, '106-admin-home');
    await page.emulateMedia({ colorScheme: 'dark' });
    await shot(page, '107-admin-home-dark');
  });
});
