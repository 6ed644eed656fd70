// One sign-in for every spec: the login form, filled as a person fills it.
const { expect } = require('@playwright/test');

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

module.exports = { signIn };
