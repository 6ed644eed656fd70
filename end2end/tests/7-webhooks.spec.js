// Webhooks, as an integrator sets them up: an endpoint added on the Account
// page (its secret shown once), a test event sent and seen delivered, the
// signature checked with the Standard Webhooks reference library; and an
// admin replaying a dead delivery, which arrives with the same id and body.
// The receiver is this test's own HTTP server on 127.0.0.1.
const { test, expect } = require('@playwright/test');
const { signIn, shotsDir } = require('./session');
const http = require('http');
const fs = require('fs');
const path = require('path');
const { Webhook } = require('standardwebhooks');

const SHOTS = shotsDir();
const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

const ADMIN = { email: 'admin@studio.test', password: 'admin password 123' };
const PAINTER = { email: 'painter@studio.test', password: 'painter password 1' };

/** A receiver on loopback that records what it gets and answers `status()`. */
function receiver(status) {
  const got = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      got.push({ headers: req.headers, body });
      res.writeHead(status());
      res.end('ok');
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({
    url: `http://127.0.0.1:${server.address().port}/hook`, got, close: () => server.close(),
  })));
}

test.describe.serial('webhooks', () => {
  let good;
  let failing;
  let secret;
  let answer = 500;

  test.beforeAll(async () => {
    good = await receiver(() => 200);
    failing = await receiver(() => answer);
  });
  test.afterAll(() => { good.close(); failing.close(); });

  test('a person adds an endpoint, sees its secret once, sends a test event and sees it delivered', async ({ page }) => {
    await signIn(page, PAINTER);
    await page.goto('/account');
    const add = page.getByTestId('add-endpoint');
    await add.getByLabel('Endpoint URL').fill(good.url);
    await add.getByRole('button', { name: 'Add endpoint' }).click();
    await expect(page.getByRole('status').first()).toContainText('Endpoint added');
    secret = await page.locator('#new-secret').textContent();
    expect(secret).toMatch(/^whsec_/);
    await shot(page, '50-webhook-secret-once');
    // Shown once: gone on the next visit.
    await page.reload();
    await expect(page.locator('#new-secret')).toHaveCount(0);
    await expect(page.getByTestId('endpoint-row')).toContainText(good.url);

    await page.getByTestId('endpoint-row').getByRole('button', { name: 'Send test event' }).click();
    await expect(page.getByRole('status').first()).toContainText('test event is on its way');
    await expect(async () => {
      await page.reload();
      await expect(page.getByTestId('delivery-row').first()).toContainText('delivered', { timeout: 1000 });
    }).toPass({ timeout: 20_000 });
    await expect(page.getByTestId('delivery-row').first().getByTestId('last-status')).toHaveText('200');
    await shot(page, '51-webhook-delivered');

    // The reference library verifies what arrived.
    expect(good.got.length).toBe(1);
    const { headers, body } = good.got[0];
    const verified = new Webhook(secret).verify(body, {
      'webhook-id': headers['webhook-id'],
      'webhook-timestamp': headers['webhook-timestamp'],
      'webhook-signature': headers['webhook-signature'],
    });
    expect(verified.type).toBe('webhook.test');

    // The account secret rotates too, and the new one is shown once.
    await page.getByRole('button', { name: 'Rotate account secret' }).click();
    await expect(page.getByRole('status').first()).toContainText('New account secret made');
    await expect(page.locator('#new-secret')).toHaveText(/^whsec_/);
    await shot(page, '51b-account-secret-rotated');
    await page.reload();
    await expect(page.locator('#new-secret')).toHaveCount(0);
  });

  test('an internal address is refused, and nothing is sent to it', async ({ page }) => {
    await signIn(page, PAINTER);
    await page.goto('/account');
    const add = page.getByTestId('add-endpoint');
    await add.getByLabel('Endpoint URL').fill('https://169.254.169.254/latest/meta-data');
    await add.getByRole('button', { name: 'Add endpoint' }).click();
    // The error sits beside the form, and what was typed is still there.
    await expect(add.getByTestId('endpoint-error')).toContainText('169.254.169.254');
    await expect(add.getByLabel('Endpoint URL')).toHaveValue('https://169.254.169.254/latest/meta-data');
    await expect(page.getByTestId('endpoint-row')).toHaveCount(1);
  });

  test('an admin replays a dead delivery: the same id and body arrive', async ({ page, browser }) => {
    const ctx = await browser.newContext();
    const person = await ctx.newPage();
    await signIn(person, PAINTER);
    await person.goto('/account');
    const add = person.getByTestId('add-endpoint');
    await add.getByLabel('Endpoint URL').fill(failing.url);
    await add.getByRole('button', { name: 'Add endpoint' }).click();
    await expect(person.getByRole('status').first()).toContainText('Endpoint added');
    const row = person.getByTestId('endpoint-row').filter({ hasText: failing.url });
    await row.getByRole('button', { name: 'Send test event' }).click();
    // A test event is tried once (it says how the endpoint answers now):
    // answered 500, it is dead.
    await expect.poll(() => failing.got.length, { timeout: 20_000 }).toBe(1);
    await ctx.close();

    await signIn(page, ADMIN);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Webhooks' }).click();
    await expect(page).toHaveURL(/\/admin\/webhooks/);
    const dead = page.getByTestId('delivery-row').filter({ hasText: failing.url });
    await expect(async () => {
      await page.reload();
      await expect(dead).toHaveCount(1, { timeout: 1000 });
    }).toPass({ timeout: 20_000 });
    await expect(dead).toContainText('dead');
    await expect(dead.getByTestId('last-status')).toHaveText('500');
    await shot(page, '52-admin-webhooks-dead');
    answer = 200;
    await dead.getByRole('button', { name: 'Replay' }).click();
    await expect(page.getByRole('status').first()).toContainText('Replaying');
    await expect.poll(() => failing.got.length, { timeout: 20_000 }).toBe(2);
    const [first, replayed] = [failing.got[0], failing.got[1]];
    expect(replayed.headers['webhook-id']).toBe(first.headers['webhook-id']);
    expect(replayed.body).toBe(first.body);
    await page.goto('/admin/webhooks?state=delivered');
    await expect(page.getByTestId('delivery-row').filter({ hasText: failing.url })).toContainText('replayed 1×');
  });
});
