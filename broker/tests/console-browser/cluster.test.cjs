// Headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core) on a replica's
// console in a 3-node broker group (started by broker/tests/cluster_console.rs): the page
// names this node a replica and shows the master; a pending transaction's next check reads
// "on the master"; committing it from this page is carried out by the master, and the row
// leaves the list once the commit is replicated back.
//   NODE_PATH=... node cluster.test.cjs <replica-console-url> <transaction-id> <master-node>
const assert = require('node:assert/strict');
const { chromium } = require('playwright-core');

const [url, txn, masterNode] = process.argv.slice(2);

async function main() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
  });
  const errors = [];
  try {
    const page = await browser.newPage();
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
    await page.goto(`${url}/#overview`);
    await page.waitForSelector('#cluster .role[data-role=replica]', { timeout: 20000 });
    const banner = await page.locator('#cluster').textContent();
    console.log(`   cluster banner: ${banner}`);
    assert.match(banner, new RegExp(`master: node ${masterNode} at 127\\.0\\.0\\.1:\\d+, epoch \\d+`));
    assert.match(banner, /Actions on this page are carried out by the master/);

    await page.click('a[data-view=pending]');
    const row = page.locator(`#pending-table tbody tr[data-txn="${txn}"]`);
    await row.waitFor({ timeout: 20000 });
    assert.match(await row.textContent(), /on the master/);
    await row.locator('button.commit').click();
    await page.waitForSelector('dialog#confirm[open]');
    await page.click('#confirm-ok');
    await page.locator(`#pending-table tbody tr[data-txn="${txn}"]`).waitFor({ state: 'detached', timeout: 20000 });
    assert.equal(await page.locator('#error').isHidden(), true, await page.locator('#error').textContent());
    assert.deepEqual(errors, [], 'the page logged errors');
    console.log('cluster console browser test: ok');
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
