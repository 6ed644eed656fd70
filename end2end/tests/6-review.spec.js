// Parked work, as a reviewer works it: the provider (the mock provider, its
// own process) accepts a clip and loses the answer, so the job parks as
// "submission uncertain". The person sees that it waits for a reviewer; the
// reviewer opens the queue, reads the evidence, finds the prediction at the
// provider, reconciles, resumes the status checks, and watches the job
// recover; the person sees the outcome in plain words. Paid once.
const { test, expect } = require('@playwright/test');
const { signIn, shotsDir } = require('./session');
const fs = require('fs');
const path = require('path');

const SHOTS = shotsDir();
const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

const ADMIN = { email: 'admin@studio.test', password: 'admin password 123' };
const REVIEWER = { email: 'judge@studio.test', password: 'judge password 12' };
const PAINTER = { email: 'painter@studio.test', password: 'painter password 1' };
const MOCK = process.env.TOLLGATE_E2E_MOCK;

test.describe.serial('review', () => {
  let jobId;
  let cancelledId;
  let paidBefore;
  let replacedIds;

  test('an admin adds a reviewer', async ({ page }) => {
    await signIn(page, ADMIN);
    await page.goto('/admin/users');
    await page.getByLabel('Email', { exact: true }).fill(REVIEWER.email);
    await page.getByLabel('Role', { exact: true }).selectOption('reviewer');
    await page.getByLabel('Initial password').fill(REVIEWER.password);
    await page.getByRole('button', { name: 'Add user' }).click();
    await expect(page.getByRole('status')).toContainText(`Added ${REVIEWER.email}`);
  });

  test('a lost answer parks the clip, and its owner is told it waits for a reviewer', async ({ page, baseURL, request }) => {
    const scripted = await request.post(`${MOCK}/_mock/script`, { data: { next: ['accept_then_drop'] } });
    expect(scripted.ok()).toBeTruthy();
    await signIn(page, PAINTER);
    const r = await page.request.post('/v1/jobs', {
      headers: { Origin: baseURL, 'Idempotency-Key': 'review-clip' },
      data: { kind: 'video', prompt: 'a paper crane unfolding', model: 'mock-clip', duration_s: 2, resolution: '720p' },
    });
    expect(r.status()).toBe(201);
    jobId = (await r.json()).id;
    await page.goto(`/edits/${jobId}`);
    await expect(page.getByTestId('job-status')).toContainText('Needs review', { timeout: 30_000 });
    await expect(page.getByTestId('parked')).toContainText('Waiting for a person to check it');
    await expect(page.getByTestId('parked')).toContainText('lost its answer');
    await expect(page.getByTestId('parked')).toContainText('Nothing more is spent');
    // The owner reads one status in words: no stage names, holds or provider ids.
    await expect(page.getByTestId('parked-facts')).toHaveCount(0);
    await expect(page.getByTestId('parked')).not.toContainText('Budget held');
    await expect(page.getByTestId('timeline')).toHaveCount(0);
    await shot(page, '40-edit-waiting-for-review');
  });

  test('a reviewer reads the evidence, reconciles, resumes polling, and the job recovers', async ({ page, request }) => {
    await signIn(page, REVIEWER);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Review' }).click();
    await expect(page).toHaveURL(/\/review$/);
    await expect(page.getByTestId('count-submission_uncertain')).toBeVisible();
    const row = page.getByTestId('queue-row').filter({ hasText: jobId.slice(0, 8) });
    await expect(row).toHaveCount(1);
    await expect(row).toContainText('painter@studio.test');
    await expect(row).toContainText('Submission uncertain');
    await shot(page, '41-review-queue');

    // The filter is in the URL.
    await page.getByLabel('Stage').selectOption('submission_uncertain');
    await page.getByRole('button', { name: 'Filter' }).click();
    await expect(page).toHaveURL(/stage=submission_uncertain/);
    await expect(page.getByTestId('bulk')).toBeVisible();

    await page.goto('/review');
    await row.getByRole('link', { name: 'Open' }).click();
    await expect(page).toHaveURL(/\/review\/[0-9a-f-]+$/);
    await expect(page.getByTestId('evidence')).toContainText('A request may have been accepted');
    await expect(page.getByTestId('evidence')).toContainText(`${jobId}:1`);
    await expect(page.getByTestId('exposure')).toContainText('$0.10');
    await expect(page.getByTestId('hold')).toContainText('$0.10');
    // Only what the stage permits.
    await expect(page.getByTestId('action-reconcile')).toBeVisible();
    await expect(page.getByTestId('action-accept_failure')).toBeVisible();
    await expect(page.getByTestId('action-resume_poll')).toHaveCount(0);
    await shot(page, '42-review-record');

    // The investigation: the provider has a prediction under our key.
    const stats = await (await request.get(`${MOCK}/_mock/stats`)).json();
    const prediction = stats.predictions.find((p) => p.idempotency_key === `${jobId}:1`);
    expect(prediction).toBeTruthy();
    const reconcile = page.getByTestId('action-reconcile');
    await reconcile.getByLabel('Provider job id').fill(prediction.id);
    await reconcile.getByLabel('Evidence (required)').fill('The provider dashboard lists this prediction under our key.');
    await reconcile.getByRole('button', { name: 'Reconcile' }).click();
    await expect(page.getByRole('status').first()).toContainText('Reconciled');
    await expect(page.getByTestId('action-resume_poll')).toBeVisible();
    await expect(page.getByTestId('decisions')).toContainText(REVIEWER.email);

    const resume = page.getByTestId('action-resume_poll');
    await resume.getByLabel('Evidence (required)').fill('The prediction exists; checking its status again.');
    await resume.getByRole('button', { name: 'Resume status checks' }).click();
    await expect(page.getByRole('status').first()).toContainText('A worker will claim it');
    // The worker claims the recovery and the job finishes: the record closes.
    await expect(async () => {
      await page.reload();
      await expect(page.getByTestId('record-state')).toContainText('Closed', { timeout: 1000 });
    }).toPass({ timeout: 30_000 });
    await expect(page.getByTestId('recovery')).toContainText('succeeded');
    await expect(page.getByTestId('timeline')).toContainText('A worker began what the reviewer approved: resume status checks');
    await expect(page.getByTestId('recorded')).toContainText('recovery_claimed');
    await shot(page, '43-review-recovered');

    // Closed records are a filter away, each with the decision that closed it.
    await page.goto('/review?state=closed');
    const closed = page.getByTestId('queue-row').filter({ hasText: jobId.slice(0, 8) });
    await expect(closed.getByTestId('queue-decided')).toHaveText(`Resume status checks (${REVIEWER.email})`);
    await shot(page, '43-review-closed');
    await page.setViewportSize({ width: 390, height: 844 });
    await expect(closed.getByTestId('queue-decided')).toBeVisible();
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await shot(page, '43-review-closed-390');

    const after = await (await request.get(`${MOCK}/_mock/stats`)).json();
    expect(after.by_idempotency_key[`${jobId}:1`]).toBe(1);
  });

  test('one decision for everything a filter matches, with the count confirmed first', async ({ page }) => {
    await signIn(page, REVIEWER);
    await page.goto('/review?stage=submission_uncertain');
    const bulk = page.getByTestId('bulk');
    await expect(bulk).toContainText('1 open record matches');
    await bulk.getByLabel('Action').selectOption('accept_failure');
    await bulk.getByLabel('Evidence (required)').fill('The provider has no record of these calls; refunding.');
    await bulk.getByLabel('Refund the credits').check();
    await bulk.getByLabel('Release the budget hold (nothing was spent)').check();
    await bulk.getByTestId('bulk-confirm').check();
    await bulk.getByTestId('bulk-submit').click();
    await expect(page.getByRole('status').first()).toContainText('Decided 1 record');
    await expect(page.getByTestId('queue-empty')).toBeVisible();
    await shot(page, '45-review-bulk-done');
  });

  test('the owner sees what the reviewer did, in plain words', async ({ page }) => {
    await signIn(page, PAINTER);
    await page.goto(`/edits/${jobId}`);
    await expect(page.getByTestId('job-status')).toContainText('Done');
    await expect(page.getByTestId('parked')).toContainText('Reviewed');
    await expect(page.getByTestId('parked')).toContainText('checking with the provider again');
    await shot(page, '44-edit-reviewed');
  });

  test('an owner who cancels parked work gets the credits back, and the record stays for a reviewer', async ({ page, baseURL, request }) => {
    const scripted = await request.post(`${MOCK}/_mock/script`, { data: { next: ['accept_then_drop'] } });
    expect(scripted.ok()).toBeTruthy();
    await signIn(page, PAINTER);
    const r = await page.request.post('/v1/jobs', {
      headers: { Origin: baseURL, 'Idempotency-Key': 'review-clip-cancelled' },
      data: { kind: 'video', prompt: 'a kite over dunes', model: 'mock-clip', duration_s: 2, resolution: '720p' },
    });
    expect(r.status()).toBe(201);
    const cancelled = (await r.json()).id;
    await page.goto(`/edits/${cancelled}`);
    await expect(page.getByTestId('job-status')).toContainText('Needs review', { timeout: 30_000 });
    await page.getByRole('button', { name: 'Cancel and refund' }).click();
    await expect(page.getByTestId('parked')).toContainText('Cancelled: your credits are back');
    await expect(page.getByTestId('parked')).toContainText('A reviewer still settles what it cost');
    await expect(page.getByTestId('parked')).not.toContainText('judge@studio.test');
    await shot(page, '46-edit-cancelled-while-parked');
    // On a phone too, without scrolling sideways.
    await page.setViewportSize({ width: 390, height: 844 });
    await expect(page.getByTestId('parked')).toContainText('Cancelled: your credits are back');
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await shot(page, '46-edit-cancelled-while-parked-390');
    cancelledId = cancelled;
  });

  test('the record of a cancelled job stays in the queue, with only what can still be decided', async ({ page }) => {
    await signIn(page, REVIEWER);
    await page.goto('/review?stage=submission_uncertain');
    const row = page.getByTestId('queue-row').filter({ hasText: cancelledId.slice(0, 8) });
    await expect(row).toHaveCount(1);
    await row.getByRole('link', { name: 'Open' }).click();
    await expect(page.getByTestId('action-reconcile')).toBeVisible();
    await expect(page.getByTestId('action-accept_failure')).toBeVisible();
    await expect(page.getByTestId('action-resume_poll')).toHaveCount(0);
    await expect(page.getByTestId('evidence')).toContainText('Request fingerprint');
    await expect(page.getByTestId('evidence')).toContainText('Job status');
    const accept = page.getByTestId('action-accept_failure');
    await expect(accept).toContainText('got the credits back then');
    await expect(accept.getByLabel('Keep the credits (the provider may have been paid)')).toHaveCount(0);
    await shot(page, '47-review-cancelled-record');
    // Its decision closes it: the hold is booked at the estimate.
    await accept.getByLabel('Keep the hold booked at the estimate').check();
    await accept.getByLabel('Evidence (required)').fill('The provider billed the lost call; the owner had cancelled.');
    await accept.getByRole('button', { name: 'Accept the failure' }).click();
    await expect(page.getByTestId('record-state')).toContainText('Closed');
    await expect(page.getByTestId('decisions')).toContainText(REVIEWER.email);
  });

  test('failed generations park for a reviewer where the model says so', async ({ page, baseURL, request }) => {
    const scripted = await request.post(`${MOCK}/_mock/script`, { data: { next: ['fail', 'fail'] } });
    expect(scripted.ok()).toBeTruthy();
    await signIn(page, PAINTER);
    const ids = [];
    for (const key of ['bulk-new-1', 'bulk-new-2']) {
      const r = await page.request.post('/v1/jobs', {
        headers: { Origin: baseURL, 'Idempotency-Key': key },
        data: { kind: 'video', prompt: `a paper boat ${key}`, model: 'mock-clip-park', duration_s: 2, resolution: '720p' },
      });
      expect(r.status()).toBe(201);
      ids.push((await r.json()).id);
    }
    replacedIds = ids;
    for (const id of ids) {
      await expect(async () => {
        const j = await (await page.request.get(`/v1/jobs/${id}`)).json();
        expect(j.status).toBe('parked');
      }).toPass({ timeout: 30_000 });
    }
    paidBefore = (await (await request.get(`${MOCK}/_mock/stats`)).json()).paid_predictions;
  });

  test('a bulk new attempt shows each duplicate cost, the total and the day\'s room, and starts what it confirmed', async ({ page, request }) => {
    const before = paidBefore;
    await signIn(page, REVIEWER);
    await page.goto('/review?stage=generation_failed');
    const bulk = page.getByTestId('bulk');
    await expect(bulk).toContainText('2 open records match');
    await expect(bulk.getByTestId('bulk-costs')).toContainText('$0.20 in all');
    await expect(bulk.getByTestId('bulk-room')).toContainText('room for 2 of 2');
    await bulk.getByText("Each record's possible duplicate cost").click();
    await shot(page, '48-review-bulk-new-attempt');
    await page.setViewportSize({ width: 390, height: 844 });
    await expect(bulk.getByTestId('bulk-room')).toBeVisible();
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    await shot(page, '48-review-bulk-new-attempt-390');
    await page.setViewportSize({ width: 1280, height: 900 });
    await bulk.getByLabel('Action').selectOption('new_attempt');
    await bulk.getByLabel('Evidence (required)').fill('The provider had an outage; both may run again.');
    await bulk.getByTestId('bulk-confirm').check();
    await bulk.getByTestId('bulk-submit').click();
    await expect(page.getByRole('status').first()).toContainText('Decided 2 records');
    await expect(async () => {
      const after = (await (await request.get(`${MOCK}/_mock/stats`)).json()).paid_predictions;
      expect(after).toBe(before + 2);
    }).toPass({ timeout: 30_000 });
    // A client holding the old id follows it to the new job, both ways.
    const old = await (await page.request.get(`/v1/jobs/${replacedIds[0]}`)).json();
    expect(old.status).toBe('failed');
    expect(old.replaced_by).toBeTruthy();
    const replacement = await (await page.request.get(`/v1/jobs/${old.replaced_by}`)).json();
    expect(replacement.replaces).toBe(old.id);
    // The owner's page says so in words and links to the new attempt.
    await page.context().clearCookies();
    await signIn(page, PAINTER);
    await page.goto(`/edits/${old.id}`);
    await expect(page.getByTestId('replaced-by')).toContainText('you pay once');
    await shot(page, '49-replaced-by');
    await page.getByTestId('replaced-by').getByRole('link', { name: 'Follow the new attempt' }).click();
    await expect(page).toHaveURL(new RegExp(`/edits/${old.replaced_by}$`));
    await expect(page.getByTestId('replaces')).toContainText('See the earlier attempt');
  });

  test('a person who is not a reviewer cannot open the queue', async ({ page }) => {
    await signIn(page, PAINTER);
    const response = await page.goto('/review');
    expect(response.status()).toBe(403);
    await expect(page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Review' })).toHaveCount(0);
  });
});
