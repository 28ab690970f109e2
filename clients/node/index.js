'use strict';
// vq-job: the Node.js client of vq_job (a durable delayed-job queue in PostgreSQL).
//   const { Worker, enqueue } = require('vq-job')

const { Worker } = require('./lib/worker');
const { Job, JobCancelledError } = require('./lib/job');
const { enqueue, enqueueMany } = require('./lib/enqueue');

module.exports = { Worker, Job, JobCancelledError, enqueue, enqueueMany };
