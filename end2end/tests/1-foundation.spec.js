// The foundation, as a person meets it: first-run setup, sign in, roles,
// tokens, grants and sign out. Runs in order against one fresh server.
const { test, expect } = require('@playwright/test');
const session = require('./session');
const { shotsDir } = session;
const fs = require('fs');
const path = require('path');

const SHOTS = shotsDir();
const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

const ADMIN = { email: 'admin@studio.test', password: 'admin password 123' };
const USER = { email: 'maya@studio.test', password: 'maya password 123' };
const REVIEWER = { email: 'rev@studio.test', password: 'rev password 1234' };

// Foundation's sign-ins check their landing themselves (some are refused).
const signIn = (page, who) => session.signIn(page, who, { landing: null });

test.describe.serial('foundation', () => {
  test('first-run setup creates the admin, and then is gone', async ({ page, browser }) => {
    await page.goto('/');
    await expect(page).toHaveURL(/\/setup$/);
    await expect(page.getByRole('heading', { name: 'Welcome to Tollgate' })).toBeVisible();
    await shot(page, '01-setup');

    // Reaching the page is not enough: set-up asks for the token the
    // server printed on its console.
    const token = process.env.TOLLGATE_E2E_SETUP_TOKEN;
    await page.getByLabel('Set-up token').fill('a guess at the token');
    await page.getByLabel('Admin email').fill(ADMIN.email);
    await page.getByLabel('Password', { exact: true }).fill(ADMIN.password);
    await page.getByLabel('Password again').fill(ADMIN.password);
    await page.getByRole('button', { name: 'Create admin' }).click();
    await expect(page.getByRole('alert')).toContainText('not the set-up token');
    await expect(page.getByLabel('Admin email')).toHaveValue(ADMIN.email);
    await expect(page.getByLabel('Set-up token')).toHaveValue('');
    await shot(page, '01b-setup-wrong-token');

    // A mismatched confirmation is refused and keeps the email and token.
    await page.getByLabel('Set-up token').fill(token);
    await page.getByLabel('Password', { exact: true }).fill(ADMIN.password);
    await page.getByLabel('Password again').fill('something else entirely');
    await page.getByRole('button', { name: 'Create admin' }).click();
    await expect(page.getByRole('alert')).toContainText('do not match');
    await expect(page.getByLabel('Admin email')).toHaveValue(ADMIN.email);
    await expect(page.getByLabel('Set-up token')).toHaveValue(token);

    await page.getByLabel('Password', { exact: true }).fill(ADMIN.password);
    await page.getByLabel('Password again').fill(ADMIN.password);
    await page.getByRole('button', { name: 'Create admin' }).click();
    await expect(page).toHaveURL(/\/admin\/users$/);
    await expect(page.getByRole('status')).toContainText('admin account is ready');
    await expect(page.getByTestId('users')).toContainText(ADMIN.email);

    const other = await browser.newPage();
    await other.goto('/setup');
    await expect(other).toHaveURL(/\/login$/);
    await expect(other.getByRole('heading', { name: 'Sign in' })).toBeVisible();
    // Posting the form anyway makes no second admin.
    const again = await other.request.post('/setup', {
      form: { token, email: 'second@studio.test', password: 'second password 1', confirm: 'second password 1' },
      headers: { origin: new URL(other.url()).origin },
      maxRedirects: 0,
    });
    expect(again.status()).toBe(303);
    expect(again.headers()['location']).toMatch(/^\/setup\?failed=done/);
    await other.close();
  });

  test('sign in: a wrong password is refused, the right one works', async ({ page }) => {
    await signIn(page, { email: ADMIN.email, password: 'not my password!!' });
    await expect(page.getByRole('alert')).toContainText('Email or password is incorrect');
    await expect(page.getByLabel('Email')).toHaveValue(ADMIN.email);
    await shot(page, '02-login-error');

    await signIn(page, { email: 'nobody@studio.test', password: 'not my password!!' });
    await expect(page.getByRole('alert')).toContainText('Email or password is incorrect');

    await signIn(page, ADMIN);
    // An admin's day starts on the spend overview.
    await expect(page).toHaveURL(/\/admin$/);
    await expect(page.getByRole('navigation', { name: 'Main' })).toContainText('Users');
  });

  test('the password field reveals on request (islands hydrate)', async ({ page }) => {
    await page.goto('/login');
    const field = page.getByLabel('Password', { exact: true });
    await expect(field).toHaveAttribute('type', 'password');
    // Islands wake when the browser is idle; the button works once they have.
    await expect(async () => {
      await page.getByRole('button', { name: 'Show' }).click({ timeout: 1000 });
      await expect(field).toHaveAttribute('type', 'text', { timeout: 500 });
    }).toPass({ timeout: 15_000 });
    await page.getByRole('button', { name: 'Hide' }).click();
    await expect(field).toHaveAttribute('type', 'password');
  });

  test('an admin adds people and grants credits', async ({ page }) => {
    await signIn(page, ADMIN);
    await page.goto('/admin/users');
    for (const [who, role] of [[USER, 'user'], [REVIEWER, 'reviewer']]) {
      await page.getByLabel('Email', { exact: true }).fill(who.email);
      await page.getByLabel('Role', { exact: true }).selectOption(role);
      await page.getByLabel('Initial password').fill(who.password);
      await page.getByRole('button', { name: 'Add user' }).click();
      await expect(page.getByRole('status')).toContainText(`Added ${who.email}`);
    }
    const row = page.locator(`tr[data-email="${USER.email}"]`);
    await row.getByPlaceholder('Credits').fill('25');
    await row.getByPlaceholder('Reason (optional)').fill('Welcome to the studio');
    await row.getByRole('button', { name: 'Grant' }).click();
    await expect(page.getByRole('status')).toContainText(`Granted 25 credits to ${USER.email}`);
    await expect(page.locator(`tr[data-email="${USER.email}"] td.num`)).toHaveText('25');
    await shot(page, '03-admin-users');
  });

  test('the grant shows on the user\'s Credits page; admin pages are closed to them', async ({ page }) => {
    await signIn(page, USER);
    await expect(page).toHaveURL(/\/edits$/);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Credits' }).click();
    await expect(page).toHaveURL(/\/credits$/);
    await expect(page.getByTestId('balance')).toHaveText('25');
    await expect(page.getByTestId('ledger')).toContainText('Welcome to the studio');
    await expect(page.getByRole('navigation', { name: 'Main' })).not.toContainText('Users');
    await shot(page, '04-user-credits');

    const response = await page.goto('/admin/users');
    expect(response.status()).toBe(403);
    await expect(page.getByRole('heading', { name: 'Not allowed' })).toBeVisible();
    await expect(page.getByTestId('users')).toHaveCount(0);
    await shot(page, '05-forbidden');

    // A forged post from the page's own origin is still refused by role.
    const post = await page.request.post('/admin/users', {
      form: { email: 'sneaky@studio.test', role: 'admin', password: 'sneaky password 1' },
      headers: { origin: new URL(page.url()).origin },
      maxRedirects: 0,
    });
    expect(post.status()).toBe(403);
  });

  test('a token made on the Account page works against /v1', async ({ page, context, playwright, baseURL }) => {
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: baseURL });
    await signIn(page, USER);
    await page.goto('/account');
    await page.getByLabel('Token name').fill('render farm');
    await page.getByRole('button', { name: 'Create token' }).click();
    const secret = (await page.locator('#new-secret').textContent()).trim();
    expect(secret).toMatch(/^tg_[A-Za-z0-9_-]{40,}$/);
    // One click copies it.
    await page.getByTestId('copy').click();
    await expect(page.getByTestId('copy')).toHaveText('Copied');
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(secret);
    await expect(page.getByTestId('tokens')).toContainText('render farm');
    await shot(page, '06-account-token');

    const api = await playwright.request.newContext({ baseURL, extraHTTPHeaders: { authorization: `Bearer ${secret}` } });
    const me = await api.get('/v1/me');
    expect(me.status()).toBe(200);
    expect(await me.json()).toMatchObject({ email: USER.email, role: 'user' });
    const credits = await api.get('/v1/credits');
    expect(credits.status()).toBe(200);
    const body = await credits.json();
    expect(body.balance).toBe(25);
    expect(body.entries[0]).toMatchObject({ kind: 'grant', amount: 25 });

    // Shown once: a reload does not show it again.
    await page.reload();
    await expect(page.locator('#new-secret')).toHaveCount(0);

    // Revoked, it stops working.
    await page.getByTestId('tokens').getByRole('button', { name: 'Revoke' }).click();
    await expect(page.getByRole('status')).toContainText('Token revoked');
    expect((await api.get('/v1/me')).status()).toBe(401);
    await api.dispose();
  });

  test('every role against every page group', async ({ browser }) => {
    const groups = { '/credits': 'user', '/account': 'user', '/review': 'reviewer', '/admin/users': 'admin' };
    const rank = { user: 1, reviewer: 2, admin: 3 };
    for (const [who, role] of [[null, null], [USER, 'user'], [REVIEWER, 'reviewer'], [ADMIN, 'admin']]) {
      const context = await browser.newContext();
      const page = await context.newPage();
      if (who) {
        await signIn(page, who);
        await expect(page).toHaveURL({ user: /\/edits$/, reviewer: /\/review$/, admin: /\/admin$/ }[role]);
      }
      for (const [path, least] of Object.entries(groups)) {
        const response = await page.goto(path);
        if (!role) {
          await expect(page, `anonymous ${path}`).toHaveURL(/\/login\?next=/);
        } else if (rank[role] >= rank[least]) {
          expect(response.status(), `${role} ${path}`).toBe(200);
        } else {
          expect(response.status(), `${role} ${path}`).toBe(403);
        }
      }
      await context.close();
    }
  });

  test('signing in rotates the session id', async ({ browser }) => {
    const context = await browser.newContext();
    const page = await context.newPage();
    // A failed attempt writes no session at all (nothing is kept for someone
    // who is not signed in); an attacker's planted id is not adopted either.
    await signIn(page, { email: USER.email, password: 'wrong password!!' });
    await expect(page.getByRole('alert')).toBeVisible();
    expect((await context.cookies()).find((c) => c.name === 'tollgate_session')).toBeUndefined();
    const url = new URL(page.url());
    await context.addCookies([{ name: 'tollgate_session', value: 'AAAAAAAAAAAAAAAAAAAAAA', domain: url.hostname, path: '/' }]);
    const planted = (await context.cookies()).find((c) => c.name === 'tollgate_session');
    await signIn(page, USER);
    await expect(page).toHaveURL(/\/edits$/);
    const after = (await context.cookies()).find((c) => c.name === 'tollgate_session');
    expect(after.value).not.toBe(planted.value);
    // The id from before sign-in opens nothing.
    const other = await browser.newContext();
    await other.addCookies([planted]);
    const p2 = await other.newPage();
    await p2.goto('/credits');
    await expect(p2).toHaveURL(/\/login\?next=/);
    await other.close();
    await context.close();
  });

  test('sign out ends the session for good', async ({ browser }) => {
    const context = await browser.newContext();
    const page = await context.newPage();
    await signIn(page, USER);
    await expect(page).toHaveURL(/\/edits$/);
    const before = (await context.cookies()).find((c) => c.name === 'tollgate_session');
    expect(before).toBeTruthy();
    expect(before.httpOnly).toBe(true);
    expect(before.sameSite).toBe('Lax');

    await page.getByRole('button', { name: 'Sign out' }).click();
    await expect(page).toHaveURL(/\/login$/);
    await page.goto('/credits');
    await expect(page).toHaveURL(/\/login\?next=/);

    // The old cookie, replayed by someone who kept it, opens nothing.
    const thief = await browser.newContext();
    await thief.addCookies([before]);
    const stolen = await thief.newPage();
    await stolen.goto('/credits');
    await expect(stolen).toHaveURL(/\/login\?next=/);
    await thief.close();
    await context.close();
  });

  test('a disabled user cannot sign in', async ({ browser, page }) => {
    await signIn(page, ADMIN);
    await page.goto('/admin/users');
    await page.locator(`tr[data-email="${REVIEWER.email}"]`).getByRole('button', { name: 'Disable' }).click();
    await expect(page.getByRole('status')).toContainText('disabled');
    const context = await browser.newContext();
    const other = await context.newPage();
    await signIn(other, REVIEWER);
    await expect(other.getByRole('alert')).toContainText('disabled');
    await context.close();
  });

  test('pages fit a phone', async ({ browser }) => {
    const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2 });
    const page = await context.newPage();
    await page.goto('/login');
    await shot(page, '07-phone-login');
    await signIn(page, ADMIN);
    await page.goto('/admin/users');
    await shot(page, '08-phone-users');
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(1);
    await context.close();
  });

  test('dark mode is readable', async ({ browser }) => {
    const context = await browser.newContext({ colorScheme: 'dark' });
    const page = await context.newPage();
    await signIn(page, ADMIN);
    await page.goto('/account');
    await shot(page, '09-dark-account');
    await context.close();
  });

  test('pages send security headers, and the islands hydrate under the policy', async ({ page, baseURL }) => {
    const problems = [];
    page.on('console', (m) => { if (m.type() === 'error') problems.push(m.text()); });
    page.on('pageerror', (e) => problems.push(e.message));
    await signIn(page, ADMIN);
    const response = await page.goto('/edits/new');
    const h = response.headers();
    const csp = h['content-security-policy'];
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).toMatch(/script-src 'self' 'nonce-[A-Za-z0-9+/=_-]+'/);
    expect(csp).not.toContain("'unsafe-inline' 'unsafe-eval'");
    expect(h['referrer-policy']).toBe('same-origin');
    expect(h['x-content-type-options']).toBe('nosniff');
    expect(h['x-frame-options']).toBe('DENY');
    // The composer island wakes up under the policy: it takes a file.
    const { makePng } = require('./png');
    await expect(async () => {
      await page.getByTestId('photo-input').setInputFiles({ name: 'p.png', mimeType: 'image/png', buffer: makePng(64, 48) });
      await expect(page.getByAltText('Your photo')).toBeVisible({ timeout: 2000 });
    }).toPass({ timeout: 20_000 });
    expect(problems, problems.join('\n')).toEqual([]);
    // A page cannot be framed, and an API answer is no page at all.
    const api = await page.request.get('/v1/me');
    expect(api.headers()['content-security-policy']).toBe("default-src 'none'; frame-ancestors 'none'");
    // A form post from another site is refused, and so is a token on a form route.
    const forged = await page.request.post('/account/tokens', {
      headers: { Origin: 'https://evil.example' }, form: { name: 'x' }, maxRedirects: 0,
    });
    expect(forged.status()).toBe(403);
    // After sign-in, only a path of ours: a tab before a host is not one.
    const ctx = await page.context().browser().newContext();
    const fresh = await ctx.newPage();
    await fresh.goto('/login');
    const login = await fresh.request.post('/login', {
      headers: { Origin: baseURL },
      form: { email: ADMIN.email, password: ADMIN.password, next: '/\t/evil.example' },
      maxRedirects: 0,
    });
    expect(login.status()).toBe(303);
    expect(login.headers()['location']).toBe('/admin');
    await ctx.close();
  });
});
