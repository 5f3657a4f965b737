// Headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core; no browser
// download) against a real rocklet broker fed by the official Python v5 client:
//   1. the overview sees the half backlog grow while the producer prepares transactions;
//   2. the pending view shows them parked (their producer went away); one is committed by
//      hand, with the confirmation, and two more rolled back at once by selecting them;
//   3. a consumer (Python, started before the commit) receives it;
//   4. the message search finds it by key and shows its history (half, commit, delivery, ack);
//   5. charts draw a lone sample and the alert thresholds, the alert banner lists alerts;
//   6. the console opened as http://ak:sk@host/ (credentials in the URL) works.
// Screenshots of each step go to the artifacts directory.
//   NODE_PATH=... node console.test.cjs <console-url> <grpc-addr> <ak> <sk> <python> <artifacts>
const path = require('node:path');
const fs = require('node:fs');
const os = require('node:os');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const { chromium } = require('playwright-core');

const [url, grpc, ak, sk, python, art] = process.argv.slice(2);
const feed = path.join(__dirname, 'feed.py');
const topic = `ConsolePay${Date.now() % 100000}`;
const group = `ConsoleWorkers${Date.now() % 100000}`;
const keys = ['order-1', 'order-2', 'order-3', 'order-4', 'order-5', 'order-6'];

function run(args, onLine) {
  const p = spawn(python, [feed, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = [];
  let buf = '';
  p.stdout.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (!line.trim()) continue;
      console.log(`  feed ${args[0]}: ${line}`);
      try { const v = JSON.parse(line); lines.push(v); onLine?.(v); } catch { /* client log line */ }
    }
  });
  const done = new Promise((resolve) => p.on('exit', (code) => resolve({ code, lines })));
  return { p, done };
}

async function cardNumber(page, id) {
  const t = await page.locator(`#card-${id} b`).textContent();
  return Number(t);
}

async function main() {
  fs.mkdirSync(art, { recursive: true });
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'rocklet-console-chromium-'));
  const ctx = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1440, height: 1000 },
    httpCredentials: { username: ak, password: sk },
  });
  const errors = [];
  let consumer;
  try {
    const page = ctx.pages()[0] ?? (await ctx.newPage());
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
    await page.goto(`${url}/#overview`);
    await page.selectOption('#refresh', '2000');
    await page.waitForSelector('#card-half-backlog b');
    const before = await cardNumber(page, 'half-backlog');

    // 1. The backlog grows as the producer prepares (0.7 s apart), seen by the page itself.
    console.log(`== prepare ${keys.length} transactions on ${topic}`);
    const prep = run(['prepare', grpc, ak, sk, topic, ...keys]);
    const seen = new Set();
    const t0 = Date.now();
    while (Date.now() - t0 < 60000) {
      const n = await cardNumber(page, 'half-backlog');
      seen.add(n);
      if (n >= before + keys.length) break;
      await page.waitForTimeout(300);
    }
    const prepared = await prep.done;
    assert.equal(prepared.code, 0, 'the producer failed');
    const values = [...seen].sort((a, b) => a - b);
    console.log(`   backlog values the page showed: ${values.join(', ')}`);
    assert.ok(values.at(-1) >= before + keys.length, `the backlog reached ${values.at(-1)}`);
    assert.ok(values.filter((v) => v > before && v < before + keys.length).length >= 1,
      `the page saw the backlog grow, not only jump: ${values}`);
    // The chart has drawn samples.
    await page.waitForFunction(() => (document.querySelector('#chart-backlog path.l0')?.getAttribute('d') ?? '').includes('L'), null, { timeout: 30000 });
    await page.screenshot({ path: path.join(art, '1-overview-backlog.png') });

    // 2. Pending: parked (the producer is gone); commit order-3 by hand.
    consumer = run(['consume', grpc, ak, sk, topic, group, 'order-3']);
    await page.click('a[data-view=pending]');
    const row = page.locator('#pending-table tbody tr', { hasText: 'order-3' });
    await row.waitFor({ timeout: 20000 });
    await page.waitForFunction(() => {
      const tr = [...document.querySelectorAll('#pending-table tbody tr')].find((r) => r.textContent.includes('order-3'));
      return tr && tr.querySelector('.state-parked');
    }, null, { timeout: 60000 });
    await page.screenshot({ path: path.join(art, '2-pending-parked.png') });
    await row.locator('button.commit').click();
    await page.waitForSelector('dialog#confirm[open]');
    assert.match(await page.locator('#confirm-text').textContent(), /Commit 1 transaction/);
    await page.click('#confirm-ok');
    await page.locator('#pending-table tbody tr', { hasText: 'order-3' }).waitFor({ state: 'detached', timeout: 20000 });
    assert.equal(await page.locator('#pending-table tbody tr', { hasText: 'order-2' }).count(), 1, 'the others stay pending');
    // Many at once: roll back order-5 and order-6 with the selection.
    for (const k of ['order-5', 'order-6']) {
      await page.locator('#pending-table tbody tr', { hasText: k }).locator('input.pick').check();
    }
    await page.click('#rollback-selected');
    await page.waitForSelector('dialog#confirm[open]');
    assert.match(await page.locator('#confirm-text').textContent(), /Roll back 2 transaction/);
    await page.click('#confirm-ok');
    for (const k of ['order-5', 'order-6']) {
      await page.locator('#pending-table tbody tr', { hasText: k }).waitFor({ state: 'detached', timeout: 20000 });
    }
    await page.screenshot({ path: path.join(art, '3-pending-after-commit.png') });

    // 3. The consumer receives the committed message.
    const got = await consumer.done;
    consumer = null;
    assert.equal(got.code, 0, 'the consumer did not receive order-3');
    const received = got.lines.find((l) => l.received === 'order-3');
    assert.equal(received.body, 'payment for order-3');

    // 4. Found by key, with its history.
    await page.click('a[data-view=message]');
    await page.fill('#search [name=topic]', topic);
    await page.selectOption('#search [name=by]', 'key');
    await page.fill('#search [name=value]', 'order-3');
    await page.click('#search button');
    const found = page.locator(`.found[data-message-id="${received.message_id}"]`);
    await found.waitFor({ timeout: 20000 });
    for (const k of ['half_stored', 'check_parked', 'operator_resolved', 'committed', 'received', 'acked']) {
      await found.locator(`ol.timeline li.k-${k}`).first().waitFor({ timeout: 20000 });
    }
    assert.match(await found.textContent(), /payment for order-3/);
    assert.match(await found.textContent(), new RegExp(group));
    await page.screenshot({ path: path.join(art, '4-message-history.png'), fullPage: true });

    // The overview after it all (the README's picture).
    await page.click('a[data-view=overview]');
    await page.waitForTimeout(2500);
    await page.screenshot({ path: path.join(art, 'console.png') });

    // 5. A sample with no neighbour is drawn (a dot); the thresholds are drawn; the banner.
    const drawn = await page.evaluate(() => {
      const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
      chart(svg, [[[0, 1], [1000, null], [2000, 3], [3000, 4], [4000, null], [5000, 2]]], { threshold: [5, 'alert above 5'] });
      return { dots: svg.querySelectorAll('circle').length, line: svg.querySelectorAll('line.threshold').length, label: svg.querySelector('text.threshold-label')?.textContent };
    });
    assert.deepEqual(drawn, { dots: 2, line: 1, label: 'alert above 5' }, 'lone samples and the threshold are drawn');
    assert.match(await page.locator('#chart-backlog text.threshold-label').textContent(), /alert above 10000/);
    // The producer left its checks unanswered: the check timeout alert is pending (its 5
    // minutes have not passed), and the banner says so.
    const o = await page.evaluate(async () => (await fetch('/api/overview')).json());
    console.log(`   alerts: ${JSON.stringify(o.alerts)}`);
    assert.equal(o.thresholds.RockletHalfBacklogHigh, 10000);
    const timeout = o.alerts.find((a) => a.alert === 'RockletTransactionCheckTimeoutRateHigh');
    assert.equal(timeout?.state, 'pending', 'unanswered checks make the timeout alert pending');
    await page.locator('#alerts li.pending[data-alert=RockletTransactionCheckTimeoutRateHigh]').waitFor({ timeout: 10000 });
    assert.match(await page.locator('#alerts').textContent(), /of the transaction checks of the last 5 minutes went unanswered/);
    await page.evaluate((now) => showAlerts([{ alert: 'RockletHalfBacklogHigh', state: 'firing', value: 12000, threshold: 10000, what: 'transactions pending', runbook: 'the-half-message-backlog-grows', since: now - 400000 }], now), Date.now());
    assert.match(await page.locator('#alerts li.firing[data-alert=RockletHalfBacklogHigh]').textContent(), /firing for 6\.7 min\): 12000 transactions pending/);
    assert.deepEqual(errors, [], 'the page logged errors');

    // 6. Opened with the credentials in its URL (no stored credentials): every call works.
    const u = new URL(url);
    u.username = ak;
    u.password = sk;
    const bare = await chromium.launch({
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run'],
    });
    try {
      const p2 = await bare.newPage();
      const errors2 = [];
      p2.on('pageerror', (e) => errors2.push(e.message));
      p2.on('console', (m) => m.type() === 'error' && errors2.push(m.text()));
      await p2.goto(`${u.href}#overview`);
      await p2.waitForSelector('#card-half-backlog b', { timeout: 20000 });
      await p2.click('a[data-view=pending]');
      await p2.locator('#pending-table tbody tr', { hasText: 'order-2' }).waitFor({ timeout: 20000 });
      assert.equal(await p2.locator('#error').isHidden(), true, await p2.locator('#error').textContent());
      assert.deepEqual(errors2, [], 'the page opened with credentials in its URL logged errors');
    } finally {
      await bare.close();
    }
    console.log(`console browser test: ok; screenshots in ${art}`);
  } finally {
    if (consumer) consumer.p.kill();
    await ctx.close();
    fs.rmSync(userDataDir, { recursive: true, force: true });
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
