// One sign-in for every spec: the login form, filled as a person fills it.
const { expect } = require('@playwright/test');
const fs = require('fs');
const path = require('path');

/**
 * Signs `who` in through /login. `landing` is where a successful sign-in
 * must arrive (each role's home: edits, the review queue or the spend
 * overview); pass null to check nothing, for a test that expects the form
 * to refuse.
 */
async function signIn(page, who, { landing = /\/(edits|review|admin)$/ } = {}) {
  await page.goto('/login');
  await page.getByLabel('Email').fill(who.email);
  await page.getByLabel('Password', { exact: true }).fill(who.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  if (landing) await expect(page).toHaveURL(landing);
}

/**
 * The folder a spec keeps its screenshots in (made if missing):
 * end2end/screenshots, or TOLLGATE_E2E_SHOTS when set, so that runs on
 * two databases at once keep their pictures apart.
 */
function shotsDir(...sub) {
  const root = process.env.TOLLGATE_E2E_SHOTS || path.join(__dirname, '..', 'screenshots');
  const dir = path.join(root, ...sub);
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

module.exports = { signIn, shotsDir };
