'use strict';
// One long-lived connection of a Worker, (re)opened on demand. A connection that fails or ends
// is dropped; the next use opens a new one and runs `init` on it (LISTEN again, ...).

class Conn {
  // open: async () => ({ client, release(err) }); init: async (client) => void (may be null).
  constructor(name, open, init, onLost) {
    this.name = name;
    this._open = open;
    this._init = init;
    this._onLost = onLost;          // (conn, err) when a connection in use fails or ends
    this._client = null;
    this._release = null;
    this._connecting = null;
    this._closed = false;
  }

  get connected() {
    return this._client !== null;
  }

  // The connected client (opening one if needed).
  client() {
    if (this._client !== null) return Promise.resolve(this._client);
    if (this._closed) return Promise.reject(new Error(`vq-job: the ${this.name} connection is closed`));
    if (this._connecting === null) {
      this._connecting = this._connect().finally(() => { this._connecting = null; });
    }
    return this._connecting;
  }

  async _connect() {
    const { client, release } = await this._open();
    let dead = null;
    const lost = (err) => {
      if (dead !== null) return;
      dead = err || new Error(`vq-job: the ${this.name} connection ended`);
      if (this._client === client) {
        this._client = null;
        this._release = null;
        try { release(dead); } catch (e) { /* already gone */ }
        if (!this._closed && this._onLost) this._onLost(this, dead);
      }
    };
    client.on('error', lost);
    client.on('end', () => lost(null));
    try {
      if (this._init) await this._init(client);
    } catch (err) {
      dead = err;
      try { release(err); } catch (e) { /* ignore */ }
      throw err;
    }
    if (dead !== null) throw dead;
    if (this._closed) {
      try { release(); } catch (e) { /* ignore */ }
      throw new Error(`vq-job: the ${this.name} connection is closed`);
    }
    this._client = client;
    this._release = (err) => { dead = dead || new Error('released'); release(err); };
    return client;
  }

  async query(config) {
    const client = this._client !== null ? this._client : await this.client();
    return client.query(config);
  }

  // Close for good (waits for queries in progress on it).
  async close() {
    this._closed = true;
    if (this._connecting !== null) {
      try { await this._connecting; } catch (e) { /* never connected */ }
    }
    const release = this._release;
    this._client = null;
    this._release = null;
    if (release !== null) await release();
  }
}

module.exports = { Conn };
