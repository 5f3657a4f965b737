'use strict';
// index.d.ts is hand-maintained: fail when it and the runtime API drift apart.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const rocklet = require('..');

const dts = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8');

function declaredMembers(cls) {
  const start = dts.indexOf(`export declare class ${cls} {`);
  assert.ok(start >= 0, `class ${cls} in index.d.ts`);
  const body = dts.slice(start, dts.indexOf('\n}', start));
  const names = new Set();
  for (const m of body.matchAll(/^ {2}(?:readonly )?([A-Za-z_]\w*)\s*[(<:]/gm)) names.add(m[1]);
  names.delete('constructor');
  return names;
}

function runtimeMembers(cls) {
  const names = new Set();
  for (let p = cls.prototype; p && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const n of Object.getOwnPropertyNames(p)) names.add(n);
  }
  names.delete('constructor');
  names.delete('__panicForTest'); // test hooks, deliberately undeclared
  names.delete('__failSyncForTest');
  return names;
}

test('every Broker member is declared in index.d.ts and every declared one exists', () => {
  assert.deepEqual([...runtimeMembers(rocklet.Broker)].sort(), [...declaredMembers('Broker')].sort());
});

test('every config() field is a BrokerConfig option in index.d.ts', () => {
  const start = dts.indexOf('export interface BrokerConfig {');
  const body = dts.slice(start, dts.indexOf('\n}', start));
  const declared = [...body.matchAll(/^ {2}([A-Za-z_]\w*)\?:/gm)].map((m) => m[1]);
  const b = new rocklet.Broker({ clock: 'manual' });
  const fields = Object.keys(b.config()).filter((k) => k !== 'notifyAvailable'); // set by the binding
  b.close();
  assert.deepEqual(fields.sort(), declared.sort());
});

test('the exports match index.d.ts', () => {
  const declared = [...dts.matchAll(/^export declare class (\w+)/gm)].map((m) => m[1]).sort();
  assert.deepEqual(Object.keys(rocklet).sort(), declared);
});

test('README.md quotes the sample test as it is', () => {
  const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
  const sample = fs.readFileSync(path.join(__dirname, 'order-service.test.js'), 'utf8').trimEnd();
  assert.ok(readme.includes(sample), 'README.md is out of date: regenerate its sample section');
});
