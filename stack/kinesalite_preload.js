// Loaded into kinesalite with `node --require` (stack/kinesis.py).
//
// 1. kinesalite has no bind-address setting and listens on every interface: keep it on loopback like
//    every other service.
// 2. kinesalite rethrows a request's error, and Node 20 gives an `aborted` ECONNRESET error to every
//    request whose client closed the connection before the answer (a job killed mid-call, a timed-out
//    read): uncaught, it ended the endpoint for every other client. Log those and keep serving; any other
//    uncaught error still ends the process.
// 3. kinesalite converts every record's sequence number between decimal and hex with bignumber.js, once
//    per record put and once per record read: about half of its CPU. The same conversions with the
//    language's BigInt give the same strings (tests/unit/test_kinesis_endpoint.py compares them).
// 4. kinesalite turns each put record's partition key into a bignumber.js hash key and compares it with
//    every shard's bounds, parsing the bounds' decimal strings on each comparison: five times the cost of
//    the key's MD5. The hash key here is a BigInt and the bounds are parsed once.
'use strict';

const crypto = require('crypto');
const net = require('net');
const path = require('path');

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' && typeof args[1] !== 'string') args.splice(1, 0, '127.0.0.1');
  return listen.apply(this, args);
};

process.on('uncaughtException', (err) => {
  if (err && err.code === 'ECONNRESET') {
    console.error(`a client closed its connection mid-request: ${err.message}`);
    return;
  }
  console.error(err);
  process.exit(1);
});

const POW_2_124 = 1n << 124n;
const POW_2_124_NEXT = (1n << 125n) * 16n;
const POW_2_185 = 1n << 185n;
const POW_2_185_NEXT = (1n << 185n) * 3n / 2n;
const DECIMAL = /^\d+$/;

// kinesalite's db/index.js parseSequence for version-2 sequence numbers (every one it makes); anything
// else goes to the original.
function parseSequence(original, seq) {
  if (typeof seq !== 'string' || !DECIMAL.test(seq)) return original(seq);
  let seqNum = BigInt(seq);
  if (seqNum < POW_2_124) seqNum += POW_2_124;
  if (seqNum < POW_2_124_NEXT || !(seqNum > POW_2_185 && seqNum < POW_2_185_NEXT)) return original(seq);
  const hex = seqNum.toString(16);
  if (parseInt(hex.slice(hex.length - 1), 16) !== 2) return original(seq);
  const seqIxHex = hex.slice(11, 27);
  let shardIxHex = hex.slice(38, 46);
  if (parseInt(seqIxHex[0], 16) > 7) throw new Error('Sequence index too high');
  if (parseInt(shardIxHex[0], 16) > 7) shardIxHex = '-' + shardIxHex;
  const shardCreateSecs = parseInt(hex.slice(1, 10), 16);
  if (shardCreateSecs >= 16025175000) throw new Error('Date too large: ' + shardCreateSecs);
  return {
    shardCreateTime: shardCreateSecs * 1000,
    seqIx: BigInt('0x' + seqIxHex).toString(),
    byte1: hex.slice(27, 29),
    seqTime: parseInt(hex.slice(29, 38), 16) * 1000,
    shardIx: parseInt(shardIxHex, 16),
    version: 2,
  };
}

// kinesalite's stringifySequence for version 2 with an integer (or decimal string) seqIx; anything else
// goes to the original.
function stringifySequence(original, shardIxToHex, obj) {
  const seqIx = obj.seqIx || 0;
  const integral = Number.isSafeInteger(seqIx) || (typeof seqIx === 'string' && DECIMAL.test(seqIx));
  if ((obj.version != null && obj.version != 2) || !integral) return original(obj);
  return BigInt('0x' + [
    '2',
    ('00000000' + Math.floor(obj.shardCreateTime / 1000).toString(16)).slice(-9),
    (obj.shardIx || 0).toString(16).slice(-1),
    ('0000000000000000' + BigInt(seqIx).toString(16)).slice(-16),
    obj.byte1 || '00',
    ('00000000' + Math.floor((obj.seqTime || obj.shardCreateTime) / 1000).toString(16)).slice(-9),
    shardIxToHex(obj.shardIx),
    '2',
  ].join('')).toString();
}

const decimals = new Map();

// A partition key's hash key, compared like kinesalite's (a bignumber.js value) with shard bounds, which
// are decimal strings; any other operand goes to kinesalite's own.
class HashKey {
  constructor(original, partitionKey) {
    this.original = original;
    this.partitionKey = partitionKey;
    this.value = BigInt('0x' + crypto.createHash('md5').update(partitionKey, 'utf8').digest('hex'));
  }

  comparedTo(other) {
    if (typeof other !== 'string' || !DECIMAL.test(other)) {
      return this.original(this.partitionKey).comparedTo(other);
    }
    let bound = decimals.get(other);
    if (bound === undefined) {
      bound = BigInt(other);
      if (decimals.size < 10000) decimals.set(other, bound);
    }
    return this.value < bound ? -1 : this.value > bound ? 1 : 0;
  }

  toFixed() {
    return this.value.toString();
  }
}

// kinesalite's modules, found from its main script (the last argument of `node --require this main.js`)
// or, under a test, from KINESALITE_MAIN.
function kinesaliteDb() {
  const main = process.env.KINESALITE_MAIN || process.argv[1];
  return require(path.join(path.dirname(require.resolve(main)), 'db'));
}

const db = kinesaliteDb();
const originalParse = db.parseSequence;
const originalStringify = db.stringifySequence;
const originalHashKey = db.partitionKeyToHashKey;
db.parseSequence = (seq) => parseSequence(originalParse, seq);
db.stringifySequence = (obj) => stringifySequence(originalStringify, db.shardIxToHex, obj);
db.partitionKeyToHashKey = (partitionKey) => new HashKey(originalHashKey, partitionKey);
module.exports = {originalParse, originalStringify, originalHashKey, parseSequence: db.parseSequence,
  stringifySequence: db.stringifySequence, partitionKeyToHashKey: db.partitionKeyToHashKey};
