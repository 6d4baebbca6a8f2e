#!/bin/bash
# Developer shortcut: pg_regress and isolation tests on a throwaway cluster,
# e.g.  scripts/regress-local.sh REGRESS=guard ISOLATION=
# (results/ and output_iso/ stay in the tree for reading).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$PROJECT_ROOT"
with_throwaway_cluster make installcheck TAP_TESTS= "$@"
