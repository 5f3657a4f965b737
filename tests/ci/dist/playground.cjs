// Headless Chromium (Debian's /usr/bin/chromium, playwright-core; no browser download) opens
// the playground at a URL, as a user of the static site or of `rocklet playground` would,
// and clicks a transaction through: a producer that crashes after its half message, the
// clock stepped until the check commits it, the consumer lane showing it once.
//   NODE_PATH=.tools/node_modules node tests/ci/dist/playground.cjs http://127.0.0.1:PORT/ [shot.png]
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const assert = require('node:assert/strict');
const { chromium } = require('playwright-core');

const url = process.argv[2];
const shot = process.argv[3];

async function main() {
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rocklet-dist-chromium-'));
  const ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1440, height: 1000 },
  });
  const errors = [];
  try {
    const page = ctx.pages()[0] ?? (await ctx.newPage());
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
    await page.goto(url);
    await page.waitForSelector('body[data-ready]', { timeout: 20000 });
    assert.equal(await page.getAttribute('body', 'data-ready'), 'ok', 'the page failed to start');
    const consumed = (body) => page.locator('[data-testid=consumer-msg]', { hasText: `“${body}”` }).count();
    const card = (body) => page.locator('[data-testid=txn]', { hasText: `“${body}”` });
    await page.selectOption('#checker', 'commit');
    await page.fill('#body', 'dist-order');
    await page.click('#begin-txn');
    await card('dist-order').getByRole('button', { name: 'Crash producer' }).click();
    assert.equal(await consumed('dist-order'), 0, 'visible before the check');
    let steps = 0;
    while (!/CHECK_TRANSACTION_STATE/.test(await page.textContent('#timeline'))) {
      assert.ok(!(await page.isDisabled('#step')), 'no event left, but no check happened');
      await page.click('#step');
      assert.ok(++steps < 10, 'no check after 10 steps');
    }
    assert.equal(await consumed('dist-order'), 1, 'consumed once after the check');
    if (shot) await page.screenshot({ path: shot, fullPage: true });
    assert.deepEqual(errors, [], 'errors on the page');
  } finally {
    await ctx.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

main().then(
  () => console.log(`playground OK at ${url}: crashed producer, check committed, consumed once`),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
