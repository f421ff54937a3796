// node kinesalite_sequences.js PRELOAD COUNT: the preload's sequence-number conversions and partition-key
// hash keys against kinesalite's own, on COUNT generated sequence numbers of every version and on odd
// inputs, and on COUNT / 10 partition keys compared with shard bounds; prints the count of sequence numbers
// checked, exits 1 at the first difference (KINESALITE_MAIN: kinesalite's cli.js).
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
// Shard bounds as createStream makes them for 1 to 12 shards, and each key's own hash key and neighbours.
const POW_128 = 1n << 128n;
const bounds = [];
for (let shards = 1; shards <= 12; shards++) {
  for (let i = 0; i <= shards; i++) bounds.push(String((POW_128 / BigInt(shards)) * BigInt(i)));
}
bounds.push(String(POW_128 - 1n));

function partitionKey(i) {
  const length = 1 + Math.floor(random() * 256);
  let key = '';
  for (let c = 0; c < length; c++) {
    key += String.fromCodePoint(i % 3 ? 32 + Math.floor(random() * 95) : 1 + Math.floor(random() * 0x2ffff));
  }
  return key;
}

function compare(hashKey, key, bound) {
  return outcome((b) => hashKey(key).comparedTo(b), bound);
}

for (let i = 0; i < count / 10; i++) {
  const key = i % 10 ? partitionKey(i) : 'user-' + i;
  const own = preload.originalHashKey(key).toFixed();
  const operands = [...bounds, own, String(BigInt(own) - 1n), String(BigInt(own) + 1n)];
  if (i === 0) operands.push(0, '-1', 'abc', preload.originalHashKey('other'));
  for (const bound of operands) {
    const want = compare(preload.originalHashKey, key, bound);
    const got = compare(preload.partitionKeyToHashKey, key, bound);
    if (want !== got) {
      console.error(`hash key of ${JSON.stringify(key)} against ${bound}: kinesalite ${want}, preload ${got}`);
      process.exit(1);
    }
  }
  if (preload.partitionKeyToHashKey(key).toFixed() !== own) {
    console.error(`hash key of ${JSON.stringify(key)}: kinesalite ${own}`);
    process.exit(1);
  }
}
console.log(checked);
