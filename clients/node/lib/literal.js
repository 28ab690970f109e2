'use strict';
// Array parameters as PostgreSQL array literals, built by joining strings: cheaper than letting
// node-postgres convert JavaScript arrays element by element, and the statement casts them.

// An element of a text-like array: double-quoted, backslash and double quote escaped. NUL cannot
// be stored in text and is dropped.
function quote(s) {
  s = String(s);
  if (s.indexOf('\u0000') >= 0) s = s.replace(/\u0000/g, '');
  return '"' + s.replace(/["\\]/g, '\\$&') + '"';
}

// Elements that need no quoting (uuids, integers, outcome words).
function plainArray(items) {
  return '{' + items.join(',') + '}';
}

// Elements to quote; null and undefined become NULL.
function quotedArray(items) {
  let out = '{';
  for (let i = 0; i < items.length; i++) {
    if (i > 0) out += ',';
    const v = items[i];
    out += v == null ? 'NULL' : quote(v);
  }
  return out + '}';
}

// Integers (or bigints); null and undefined become NULL.
function numberArray(items) {
  let out = '{';
  for (let i = 0; i < items.length; i++) {
    if (i > 0) out += ',';
    const v = items[i];
    out += v == null ? 'NULL' : String(v);
  }
  return out + '}';
}

// JSON text for a jsonb parameter or element; strings lose NUL characters (jsonb refuses \u0000).
function jsonText(value) {
  const text = JSON.stringify(value);
  if (text === undefined) return null;
  return text.indexOf('\\u0000') >= 0 ? JSON.stringify(value, (k, v) => (typeof v === 'string' ? v.replace(/\u0000/g, '') : v)) : text;
}

// A length of time in milliseconds as an interval literal.
function interval(ms) {
  return `${ms} milliseconds`;
}

module.exports = { quote, plainArray, quotedArray, numberArray, jsonText, interval };
