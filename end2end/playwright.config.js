// Playwright drives Debian's Chromium (never a downloaded browser) against a
// Tollgate that this config starts on a fresh SQLite database.
const { defineConfig } = require('@playwright/test');
const path = require('path');
const os = require('os');
const fs = require('fs');

const port = process.env.TOLLGATE_E2E_PORT || '3917';
const baseURL = `http://127.0.0.1:${port}`;
const bin = process.env.TOLLGATE_BIN || path.join(__dirname, '..', 'target', 'debug', 'tollgate');
const mockBin = process.env.TOLLGATE_MOCK_BIN || path.join(path.dirname(bin), 'tollgate-mock-provider');
// The mock provider, as its own process, serves the one http model of the
// browser tests (parked work a reviewer reconciles and resumes).
const mockPort = String(Number(port) + 100);
process.env.TOLLGATE_E2E_MOCK = `http://127.0.0.1:${mockPort}`;
// First-run set-up asks for the token the server prints; the tests choose it.
process.env.TOLLGATE_E2E_SETUP_TOKEN = process.env.TOLLGATE_E2E_SETUP_TOKEN || 'e2e-setup-token-0123456789';
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tollgate-e2e-'));
const configFile = path.join(dataDir, 'tollgate.toml');
fs.writeFileSync(configFile, fs.readFileSync(path.join(__dirname, 'tollgate.toml'), 'utf8') + `
# Written by playwright.config.js: the mock provider's address is this run's.
[[models]]
id = "mock-clip"
name = "Mock clip (http)"
kind = "video"
provider = "http"
endpoint = "http://127.0.0.1:${mockPort}"
price = { per_generation = "0.10" }
durations_s = [2]
poll_ms = 100
backoff_ms = 100
timeout_ms = 3000

# The same provider, with a failed generation parked for a reviewer (who
# may accept it or order a new attempt) instead of refunded.
[[models]]
id = "mock-clip-park"
name = "Mock clip (parks failures)"
kind = "video"
provider = "http"
endpoint = "http://127.0.0.1:${mockPort}"
price = { per_generation = "0.10" }
durations_s = [2]
poll_ms = 100
backoff_ms = 100
timeout_ms = 3000
attempts = 1
on_failure = "park"
`);

module.exports = defineConfig({
  testDir: './tests',
  fullyParallel: false,
  workers: 1,
  retries: 0,
  timeout: 60_000,
  reporter: [['list']],
  // Its own folder per run (TOLLGATE_E2E_OUTPUT): Playwright empties it at
  // the start, and scripts/test runs SQLite and PostgreSQL side by side.
  outputDir: process.env.TOLLGATE_E2E_OUTPUT || './test-results',
  use: {
    baseURL,
    browserName: 'chromium',
    screenshot: 'only-on-failure',
    launchOptions: {
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: [
        '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync',
      ],
    },
  },
  webServer: [{
    command: `${mockBin} --listen 127.0.0.1:${mockPort} --idempotency off --lookup off`,
    url: `http://127.0.0.1:${mockPort}/_mock/stats`,
    timeout: 60_000,
    reuseExistingServer: false,
    stdout: 'ignore',
    stderr: 'pipe',
  }, {
    command: `${bin} serve`,
    url: `${baseURL}/healthz`,
    timeout: 120_000,
    reuseExistingServer: false,
    stdout: 'pipe',
    stderr: 'pipe',
    env: {
      ...process.env,
      TOLLGATE_LISTEN: `127.0.0.1:${port}`,
      TOLLGATE_DATABASE_URL: process.env.TOLLGATE_E2E_DATABASE_URL || `sqlite://${dataDir}/tollgate.db`,
      TOLLGATE_STORAGE: `${dataDir}/objects`,
      TOLLGATE_LOGINS_PER_ACCOUNT_PER_MINUTE: '200',
      TOLLGATE_LOGINS_PER_ADDRESS_PER_MINUTE: '500',
      // One person orders many edits a minute here; fair use is tested apart.
      TOLLGATE_JOBS_PER_USER_PER_MINUTE: '1000',
      TOLLGATE_JOBS_BURST_PER_USER: '500',
      TOLLGATE_SITE_ROOT: process.env.TOLLGATE_SITE_ROOT || path.join(__dirname, '..', 'target', 'site'),
      TOLLGATE_CONFIG: configFile,
      TOLLGATE_SETUP_TOKEN: process.env.TOLLGATE_E2E_SETUP_TOKEN,
      // Webhooks reach the test's own receiver on loopback, and nothing else.
      TOLLGATE_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
      TOLLGATE_WEBHOOK_ALLOW_PUBLIC: 'false',
      TOLLGATE_WEBHOOK_RETRY_SCHEDULE: '1s,1s',
    },
  }],
});
