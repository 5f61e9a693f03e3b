import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatDuration, formatRate, ProgressBar } from '../../src/train/progress.js';

function fakeStream(isTTY: boolean, columns?: number): { write(text: string): void; isTTY: boolean; columns?: number; text: string } {
  const s = { isTTY, columns, text: '', write(text: string): void { s.text += text; } };
  return s;
}

test('durations and rates', () => {
  assert.equal(formatDuration(5.24), '5.2s');
  assert.equal(formatDuration(245), '4m05s');
  assert.equal(formatDuration(7380), '2h03m');
  assert.equal(formatDuration(3 * 86400 + 4 * 3600), '3d04h');
  assert.equal(formatDuration(NaN), '?');
  assert.equal(formatRate(950), '950');
  assert.equal(formatRate(12345), '12.3k');
  assert.equal(formatRate(1.25e6), '1.25M');
});

test('line: step/total, percent, loss, tokens/s and ETA measured from the first update', () => {
  let now = 0;
  const bar = new ProgressBar({ total: 100, stream: fakeStream(false), now: () => now });
  now = 5000; // the first step took 5 s (compilation): not counted in the rate
  bar.update({ step: 1, loss: 10.9876, tokens: 1000 });
  now = 6000;
  bar.update({ step: 11, loss: 7.5, tokens: 11000, extra: { lr: '3.0e-4' } });
  assert.equal(bar.line(), ' 11/100  11% | loss 7.5000 | 10.0k tok/s | lr 3.0e-4 | 6.0s elapsed | ETA 8.9s');
});

test('off a TTY: plain lines every N steps and the last one, no carriage returns', () => {
  let now = 0;
  const stream = fakeStream(false);
  const bar = new ProgressBar({ total: 10, stream, everySteps: 4, now: () => now });
  for (let step = 1; step <= 10; step++) { now += 100; bar.update({ step, loss: 1 / step }); }
  bar.log('eval loss 2.0');
  bar.finish();
  const lines = stream.text.trimEnd().split('\n');
  assert.deepEqual(lines.map((l) => l.split(' | ')[0]), [' 4/10  40%', ' 8/10  80%', '10/10 100%', 'eval loss 2.0']);
  assert.ok(!stream.text.includes('\r'));
});

test('on a TTY: redraws in place, throttled; log() prints above the bar; finish() ends the line', () => {
  let now = 0;
  const stream = fakeStream(true, 60);
  const bar = new ProgressBar({ total: 4, stream, redrawMs: 100, now: () => now });
  bar.update({ step: 1, loss: 3 });
  now = 50; bar.update({ step: 2, loss: 2.5 }); // within 100 ms: not drawn
  now = 200; bar.update({ step: 3, loss: 2 });
  bar.log('checkpoint saved');
  now = 210; bar.update({ step: 4, loss: 1.5 }); // the last step is always drawn
  bar.finish();
  const draws = stream.text.split('\r\x1b[K').filter(Boolean);
  assert.equal(draws.length, 5);
  assert.ok(draws[0]!.startsWith('1/4 [#####...............]  25%'));
  assert.ok(draws[1]!.startsWith('3/4'));
  assert.equal(draws[2], 'checkpoint saved\n');
  assert.ok(draws[4]!.startsWith('4/4 [####################] 100%') && draws[4]!.endsWith('\n'));
  assert.ok(draws.every((d) => d.replace('\n', '').length <= 59), 'lines are cut to the terminal width');
});
