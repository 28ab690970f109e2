'use strict';
// node-postgres, from this package's dependencies, or else from the application's: a package
// installed as a link to a folder (`npm install <path>` without --install-links) has no
// node_modules of its own, and Node resolves its requires from the folder, not from the app.

const path = require('path');

function load() {
  try {
    return require('pg');
  } catch (err) {
    if (err.code !== 'MODULE_NOT_FOUND') throw err;
    const paths = [process.cwd()];
    if (require.main && require.main.filename) paths.push(path.dirname(require.main.filename));
    try {
      return require(require.resolve('pg', { paths }));
    } catch (err2) {
      throw new Error('vq-job needs the pg package: install vq-job with `npm install --install-links <path>/clients/node` ' +
        '(a copy, with its dependency), or add pg to your application');
    }
  }
}

module.exports = load();
