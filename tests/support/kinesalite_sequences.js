// node kinesalite_sequences.js PRELOAD COUNT: the preload's sequence-number conversions against
// kinesalite's own, on COUNT generated sequence numbers of every version and on odd inputs; prints the
// count checked, exits 1 at the first difference (KINESALITE_MAIN: kinesalite's cli.js).
'use strict';

const preload = require(process.argv[2]);
const count = Number(process.argv[3]);

function outcome(convert, value) {
  try {
    return JSON.stringify({value: convert(value)});
  } catch (err) {
    return JSON.stringify({error: err.message});
  }
}

function same(what, value, original, fast) {
  const want = outcome(original, value);
  const got = outcome(fast, value);
  if (want !== got) {
    console.error(`${what} of ${JSON.stringify(value)}: kinesalite ${want}, preload ${got}`);
    process.exit(1);
  }
  return JSON.parse(want).value;
}

let seed = 42;
function random() {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed / 2147483648;
}

function sequenceFields(i) {
  const fields = {
    shardCreateTime: Math.floor(1.6e12 + random() * 2e11),
    shardIx: Math.floor(random() * (i % 3 ? 40 : 2 ** 31)),
    seqIx: i % 5 ? Math.floor(random() * 1e9) : String(Math.floor(random() * 2 ** 53)),
    seqTime: Math.floor(1.7e12 + random() * 1e11),
  };
  if (i % 7 === 0) fields.byte1 = 'ab';
  if (i % 11 === 0) delete fields.seqTime;
  if (i % 13 === 0) fields.seqIx = 0;
  if (i % 17 === 0) fields.seqIx = '9223372036854775807';
  if (i % 19 === 0) fields.seqIx = '18446744073709551615'; // past what a sequence number holds
  if (i % 23 === 0) fields.version = i % 2;
  if (i % 23 === 0) fields.seqRand = 'abcdef0123456789'.slice(0, fields.version ? 14 : 16);
  return fields;
}

let checked = 0;
for (let i = 0; i < count; i++) {
  const fields = sequenceFields(i);
  const sequence = same('stringifySequence', fields, preload.originalStringify, preload.stringifySequence);
  if (sequence === undefined) continue;
  same('parseSequence', sequence, preload.originalParse, preload.parseSequence);
  checked++;
}
const odd = ['0', '1', '', 'abc', '1e5', '12.5', '-5', '9'.repeat(80), 4.9590338271490256e55];
for (const value of odd) same('parseSequence', value, preload.originalParse, preload.parseSequence);
console.log(checked);
