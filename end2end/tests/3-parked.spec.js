// Parked work, as an admin meets it: a clip whose provider accepted the call
// and lost the answer cannot be sent again blindly, so the job waits for a
// reviewer; its page says why, what is held, and that nothing more is spent.
const { test, expect } = require('@playwright/test');
const { signIn, shotsDir } = require('./session');
const fs = require('fs');
const path = require('path');

const SHOTS = shotsDir();
const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

const ADMIN = { email: 'admin@studio.test', password: 'admin password 123' };

test('a call whose answer was lost parks the job for a reviewer', async ({ page, baseURL }) => {
  await signIn(page, ADMIN);

  // The browser's session speaks the API too (state changes carry our Origin).
  const me = await (await page.request.get('/v1/me')).json();
  const grant = await page.request.post(`/v1/users/${me.id}/credit-grants`, {
    headers: { Origin: baseURL, 'Idempotency-Key': 'parked-grant' },
    data: { amount: 10, reason: 'parked work demo' },
  });
  expect(grant.status()).toBe(201);
  const submitted = await page.request.post('/v1/jobs', {
    headers: { Origin: baseURL, 'Idempotency-Key': 'parked-clip' },
    data: { kind: 'video', prompt: 'a paper boat on a pond', model: 'local-flaky', duration_s: 2, resolution: '720p' },
  });
  expect(submitted.status()).toBe(201);
  const job = await submitted.json();

  await page.goto(`/edits/${job.id}`);
  await expect(page.getByTestId('job-status')).toContainText('Needs review', { timeout: 30_000 });
  await expect(page.getByTestId('parked-facts')).toContainText('Submission uncertain');
  await expect(page.getByTestId('parked')).toContainText('Nothing more is spent');
  await expect(page.getByTestId('attempts')).toContainText('sending');
  await expect(page.getByTestId('timeline')).toContainText(/parked/i);
  await shot(page, '18-parked');

  // The API says the same, and the credits stay charged until a decision.
  const stored = await (await page.request.get(`/v1/jobs/${job.id}`)).json();
  expect(stored.status).toBe('parked');
  const credits = await (await page.request.get('/v1/credits')).json();
  expect(credits.balance).toBe(10 - job.credits);
});
