#!/usr/bin/env bash
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
log "stub"
