// RoundAnswers (serve/rounds.ts): a round's requests answered as their items finish, each once, the rest at the end.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RoundAnswers } from '../../src/serve/rounds.js';

test('RoundAnswers answers a request when its last item finishes, once, in any order of items; answerRest takes the others', () => {
  const answered: [number, readonly [number, number]][] = [];
  const answers = new RoundAnswers([2, 0, 3, 1], (r, items) => answered.push([r, items]));
  answers.finished([2, 0]);
  assert.equal(answered.length, 0, 'no request has all of its items yet');
  answers.finished([3, 1]);
  assert.deepEqual(answered, [[0, [0, 2]]], 'request 0: items 0 and 1');
  answers.finished([5]);
  assert.deepEqual(answered.map(([r]) => r), [0, 3], 'request 3: item 5');
  answers.answerRest();
  assert.deepEqual(answered, [[0, [0, 2]], [3, [5, 6]], [1, [2, 2]], [2, [2, 5]]], 'the empty request and the unfinished one (item 4 never reported) at the end');
  answers.answerRest();
  answers.finished([4]);
  assert.equal(answered.length, 4, 'each request answered once');
});

test('RoundAnswers.answerRest with another answer (a failure) reaches only the requests not yet answered', () => {
  const answered: number[] = [], failed: number[] = [];
  const answers = new RoundAnswers([1, 1, 1], (r) => answered.push(r));
  answers.finished([1]);
  answers.answerRest((r) => failed.push(r));
  assert.deepEqual([answered, failed], [[1], [0, 2]]);
});
