// Repairs and the look before paying, as a person meets them: an edit
// finishes; they ask for a repair ("bolder"), which is compared with the
// version they had and delivered because it is better; a second repair that
// changes nothing is compared too, and their version is kept (with the
// candidate still there to see) and repairs stop. Then a real photograph
// of a brick wall, ordered as "a pet", stops before anything is paid for
// with questions that say what was seen, and "Change and order again" opens
// the composer with the settings filled in.
const { test, expect } = require('@playwright/test');
const { signIn, shotsDir } = require('./session');
const fs = require('fs');
const path = require('path');

const SHOTS = shotsDir();
const shot = (page, name) => page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });

const ADMIN = { email: 'admin@studio.test', password: 'admin password 123' };
const MENDER = { email: 'mender@studio.test', password: 'mender password 1' };
const PHOTOS = path.join(__dirname, '..', '..', 'tests', 'photos');

test.describe.serial('repairs', () => {
  let original;

  test('an admin sets up a person with 30 credits', async ({ page }) => {
    await signIn(page, ADMIN);
    await page.goto('/admin/users');
    await page.getByLabel('Email', { exact: true }).fill(MENDER.email);
    await page.getByLabel('Initial password').fill(MENDER.password);
    await page.getByRole('button', { name: 'Add user' }).click();
    const row = page.locator(`tr[data-email="${MENDER.email}"]`);
    await row.getByPlaceholder('Credits').fill('30');
    await row.getByRole('button', { name: 'Grant' }).click();
    await expect(page.getByRole('status')).toContainText(`Granted 30 credits to ${MENDER.email}`);
  });

  test('a repair that is better is delivered, and one that is not keeps the version they had', async ({ page, baseURL }) => {
    await signIn(page, MENDER);
    // The order itself through the API the page's session speaks.
    // A real photograph of a dog (tests/photos/README.md).
    const up = await page.request.post('/v1/assets', {
      headers: { Origin: baseURL, 'Content-Type': 'image/jpeg' },
      data: fs.readFileSync(path.join(PHOTOS, 'dog_corgi.jpg')),
    });
    expect(up.status()).toBe(201);
    const asset = await up.json();
    const made = await page.request.post('/v1/jobs', {
      headers: { Origin: baseURL, 'Idempotency-Key': 'mender-original' },
      data: { kind: 'image_edit', source: asset.id, target: { kind: 'pet', description: 'the dog' }, style: 'cross_stitch', strength: 'balanced' },
    });
    expect(made.status()).toBe(201);
    original = await made.json();

    await page.goto(`/edits/${original.id}`);
    await expect(page.getByTestId('job-status')).toContainText('Done', { timeout: 30_000 });
    // The look found the dog, and said so.
    await expect(page.getByTestId('story')).toContainText('Checked the photo: I found a dog');
    await shot(page, '40a-real-dog-edited');
    // The owner's timeline is in plain words.
    await expect(page.getByTestId('story')).toContainText('Ordered');
    await expect(page.getByTestId('story')).toContainText('Checked the photo');
    await expect(page.getByTestId('story')).toContainText('Sent to the model');
    // In the order it happened: the look came before the paid call.
    const story = await page.getByTestId('story').innerText();
    expect(story.indexOf('Checked the photo')).toBeLessThan(story.indexOf('Sent to the model'));
    await expect(page.getByTestId('timeline')).toHaveCount(0);
    const lineage = page.getByTestId('lineage');
    await expect(lineage.getByTestId('version')).toHaveCount(1);
    await expect(lineage.getByTestId('delivered-badge')).toHaveCount(1);
    await expect(page.getByTestId('repair-price')).toHaveText(`${original.credits} credits`);
    await expect(lineage).toContainText('2 of 2 repairs left');

    await page.getByLabel('What should change?').fill('make the stitches bolder');
    await page.getByTestId('repair-submit').click();
    await expect(page).toHaveURL(/\/edits\/[0-9a-f-]{36}$/);
    await expect(page.getByRole('status').first()).toContainText('Repair ordered');
    expect(page.url()).not.toContain(original.id);
    await expect(page.getByTestId('job-status')).toContainText('Done', { timeout: 30_000 });
    await expect(page.getByTestId('story')).toContainText('better, so this one is yours now');
    const versions = page.getByTestId('lineage').getByTestId('version');
    await expect(versions).toHaveCount(2);
    await expect(versions.nth(1)).toContainText('Repair 1');
    await expect(versions.nth(1)).toContainText('Yours');
    await expect(versions.nth(1)).toContainText('Better: delivered');
    await expect(versions.nth(1)).toContainText('make the stitches bolder');
    // Any two versions under one slider.
    const compare = page.getByTestId('version-compare');
    await expect(compare).toBeVisible();
    await expect(compare.getByTestId('compare-left').locator('option')).toHaveCount(3);
    await shot(page, '40-repair-improved');

    await page.getByLabel('What should change?').fill('keep the leash photographic');
    await page.getByTestId('repair-submit').click();
    await expect(page.getByTestId('job-status')).toContainText('Done', { timeout: 30_000 });
    await expect(page.getByTestId('kept-previous')).toContainText('We kept the version you had');
    await expect(page.getByTestId('story')).toContainText('no better, so we kept yours');
    await expect(page.getByTestId('repair-closed')).toContainText('takes no more repairs');
    const three = page.getByTestId('lineage').getByTestId('version');
    await expect(three).toHaveCount(3);
    await expect(three.nth(1)).toContainText('Yours');
    await expect(three.nth(2)).toContainText('No better: yours kept');
    await shot(page, '41-repair-kept-previous');

    // The API agrees: the lineage delivers the first repair.
    const l = await (await page.request.get(`/v1/jobs/${original.id}/lineage`)).json();
    expect(l.versions).toHaveLength(3);
    expect(l.delivered).toBe(l.versions[1].job.id);
    expect(l.repairs_left).toBe(0);
    expect(l.versions[2].job.lineage.retained_previous).toBe(true);

    // My edits shows the edit and its repairs as one card, with the version
    // the person has now (issue 33, 6).
    await page.goto('/edits');
    const card = page.locator(`a[data-testid="job-card"][href="/edits/${original.id}"]`);
    await expect(card).toHaveCount(1);
    await expect(card.getByTestId('card-meta')).toContainText('2 repairs');
    await expect(card.locator('img')).toHaveAttribute('src', `/v1/jobs/${l.delivered}/output`);
    for (const v of l.versions.slice(1)) {
      await expect(page.locator(`a[data-testid="job-card"][href="/edits/${v.job.id}"]`)).toHaveCount(0);
    }
    await shot(page, '42-edits-one-card-per-lineage');

    // The person prefers the first edit after all: it becomes theirs again,
    // here and on My edits; the candidate that was not kept is not offered.
    await page.goto(`/edits/${original.id}`);
    const lineage3 = page.getByTestId('lineage').getByTestId('version');
    await expect(page.getByTestId('lineage').getByTestId('choose-version')).toHaveCount(1);
    await lineage3.first().getByTestId('choose-version').click();
    await expect(page.getByRole('status').first()).toContainText('This version is yours now');
    await expect(lineage3.first()).toContainText('Yours');
    await expect(page.getByTestId('lineage').getByTestId('delivered-badge')).toHaveCount(1);
    await expect(lineage3.nth(1).getByTestId('choose-version')).toHaveCount(1);
    await expect(lineage3.nth(2).getByTestId('choose-version')).toHaveCount(0);
    await shot(page, '42b-first-edit-chosen');
    await page.goto('/edits');
    await expect(card.locator('img')).toHaveAttribute('src', `/v1/jobs/${original.id}/output`);
  });

  test('a real photo with no pet in it stops before paying, with questions, and can be ordered again changed', async ({ page }) => {
    await signIn(page, MENDER);
    await page.goto('/edits/new');
    const brick = { name: 'brick.png', mimeType: 'image/png', buffer: fs.readFileSync(path.join(PHOTOS, 'brick.png')) };
    await expect(async () => {
      await page.getByTestId('photo-input').setInputFiles(brick);
      await expect(page.getByAltText('Your photo')).toBeVisible({ timeout: 2000 });
    }).toPass({ timeout: 20_000 });
    await page.getByLabel('Describe it (optional)').fill('my cat');
    await page.getByTestId('submit').click();
    await expect(page).toHaveURL(/\/edits\/[0-9a-f-]{36}$/, { timeout: 20_000 });
    await expect(page.getByTestId('job-status')).toContainText('Failed', { timeout: 30_000 });
    await expect(page.getByRole('alert')).toContainText('nothing in this photo stands apart');
    await expect(page.getByTestId('questions')).toContainText('my cat');
    await expect(page.getByTestId('story')).toContainText('Stopped before anything was paid for');
    await expect(page.getByTestId('story')).toContainText('Refunded');
    await expect(page.getByTestId('story')).not.toContainText('Sent to the model');
    await shot(page, '42-not-ready-real-photo');

    await page.getByRole('link', { name: 'Change and order again' }).click();
    await expect(page).toHaveURL(/\/edits\/new\?from=/);
    await expect(page.getByTestId('prefill-questions')).toContainText('my cat');
    await expect(page.getByAltText('Your photo')).toBeVisible();
    await expect(page.getByLabel('Describe it (optional)')).toHaveValue('my cat');
    await shot(page, '43-order-again-prefilled');
  });

  test('a person ordered on a photo with no one in it gets questions that name what was seen', async ({ page }) => {
    await signIn(page, MENDER);
    await page.goto('/edits/new');
    const coffee = { name: 'coffee.jpg', mimeType: 'image/jpeg', buffer: fs.readFileSync(path.join(PHOTOS, 'coffee.jpg')) };
    await expect(async () => {
      await page.getByTestId('photo-input').setInputFiles(coffee);
      await expect(page.getByAltText('Your photo')).toBeVisible({ timeout: 2000 });
    }).toPass({ timeout: 20_000 });
    await page.getByText('A person', { exact: true }).click();
    await page.getByTestId('submit').click();
    await expect(page).toHaveURL(/\/edits\/[0-9a-f-]{36}$/, { timeout: 20_000 });
    await expect(page.getByTestId('job-status')).toContainText('Failed', { timeout: 30_000 });
    await expect(page.getByRole('alert')).toContainText('I found no person in this photo');
    await expect(page.getByRole('alert')).toContainText('a cup');
    await expect(page.getByTestId('questions')).toContainText('Is the person in this photo?');
    await expect(page.getByTestId('story')).not.toContainText('Sent to the model');
    await shot(page, '44-no-person-in-photo');
  });
});
