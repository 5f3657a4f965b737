// Headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core; no browser download):
// serve the playground from 127.0.0.1, play "crash, then check commits" by clicking its controls,
// and check what the consumer lane shows.
//   NODE_PATH=.tools/node_modules node bindings-wasm/tests/browser.test.cjs <playground> <screenshot.png>
const path = require('node:path');
const fs = require('node:fs');
const os = require('node:os');
const assert = require('node:assert/strict');
const { chromium } = require('playwright-core');
const serve = require('./serve.cjs');

const root = path.resolve(process.argv[2] ?? path.join(__dirname, '../playground'));
const shot = path.resolve(process.argv[3] ?? 'playground.png');

async function main() {
  const srv = await serve(root);
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rocklet-chromium-'));
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
    await page.goto(`http://127.0.0.1:${srv.address().port}/`);
    await page.waitForSelector('body[data-ready]', { timeout: 20000 });
    assert.equal(await page.getAttribute('body', 'data-ready'), 'ok', 'the page failed to start');

    const consumed = (body) => page.locator('[data-testid=consumer-msg]', { hasText: `“${body}”` }).count();
    const card = (body) => page.locator('[data-testid=txn]', { hasText: `“${body}”` });

    // The producer answers checks with COMMIT; it starts two transactions.
    await page.selectOption('#checker', 'commit');
    await page.fill('#body', 'order-A');
    await page.click('#begin-txn');
    await card('order-A').getByRole('button', { name: 'Crash producer' }).click();
    await page.fill('#body', 'order-B');
    await page.click('#begin-txn');
    await card('order-B').getByRole('button', { name: 'Rollback' }).click();
    assert.equal(await card('order-A').locator('.badge').textContent(), 'pending');
    assert.match(await card('order-B').locator('.badge').textContent(), /rolled/i);

    // Nothing is visible before the check: the half message waits in RMQ_SYS_TRANS_HALF_TOPIC.
    assert.equal(await consumed('order-A'), 0, 'order-A visible before the check');
    assert.equal(await consumed('order-B'), 0, 'rolled-back order-B visible');
    assert.match(await page.textContent('#halves'), /order-A/);
    const timeline = () => page.textContent('#timeline');
    assert.doesNotMatch(await timeline(), /CHECK_TRANSACTION_STATE/);

    // Step the clock event by event (the core's poll_timeout) until the check has happened.
    let steps = 0;
    while (!/CHECK_TRANSACTION_STATE/.test(await timeline())) {
      assert.equal(await consumed('order-A'), 0, 'order-A visible before the check');
      assert.ok(!(await page.isDisabled('#step')), 'no event left, but no check happened');
      await page.click('#step');
      assert.ok(++steps < 10, 'no check after 10 steps');
    }
    const now = Number((await page.textContent('#now')).replace(/[^\d.]/g, ''));
    assert.equal(now, 6, 'the check comes at transaction_timeout_ms (6 s)');
    assert.match(await timeline(), /END_TRANSACTION COMMIT_MESSAGE \(answer to check #1/);
    // Op tags: "d" is RocketMQ's REMOVE_TAG, the check's "c" is Rocklet's own.
    assert.match(await timeline(), /RocketMQ's op "d" \(REMOVE_TAG\) record \(COMMIT\)/);
    assert.match(await timeline(), /Rocklet's own op "c" \(checked; not a RocketMQ tag\) record/);
    assert.match(await page.textContent('#ops'), /Rocklet's checked/);
    assert.match(await page.textContent('#ops'), /RocketMQ's REMOVE_TAG/);
    assert.equal(await consumed('order-A'), 1, 'order-A must be consumed exactly once after the check');
    assert.equal(await consumed('order-B'), 0);

    // Let the clock run on: still exactly once, order-B never.
    await page.selectOption('#speed', '100');
    await page.click('#play');
    await page.waitForFunction(() => parseFloat(document.getElementById('now').textContent) > 60, null, { timeout: 15000 });
    await page.click('#play');
    while (!(await page.isDisabled('#step'))) await page.click('#step');
    assert.equal(await consumed('order-A'), 1, 'order-A consumed more than once');
    assert.equal(await consumed('order-B'), 0, 'rolled-back order-B consumed');
    assert.match(await card('order-A').locator('.badge').textContent(), /committed/i);

    // The commit log shows the half message's bytes field by field.
    await page.locator('#halves [data-rec]').first().click();
    const fields = await page.locator('#record td code').allTextContents();
    for (const f of ['TOTALSIZE', 'MAGICCODE', 'SYSFLAG', 'PREPARED_TRANSACTION_OFFSET', 'TOPIC', 'PROPERTIES']) assert.ok(fields.includes(f), f);
    assert.match(await page.textContent('#record'), /RMQ_SYS_TRANS_HALF_TOPIC/);

    fs.mkdirSync(path.dirname(shot), { recursive: true });
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`screenshot: ${shot}`);
    assert.deepEqual(errors, [], 'errors on the page');
  } finally {
    await ctx.close();
    srv.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

main().then(
  () => console.log('browser test OK: crash, then check commits; order-A consumed once after the check, order-B never'),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
