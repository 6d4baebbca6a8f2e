#!/bin/bash
# Builds the Go client offline from Debian's packages (golang-go,
# golang-github-jackc-pgx-v4-dev), vets it and runs its tests against the
# live server named by the PG* variables (pgx reads them itself), e.g. from
# the repository's root:
#   source scripts/lib.sh; with_throwaway_cluster bash clients/go/run-tests.sh
# Extra arguments go to `go test` (say, -run Election).
#
# GOPATH mode (GO111MODULE=off): Debian installs the sources of pgx and
# its dependencies under /usr/share/gocode/src, laid out by import path, as
# its own packages are built; a temporary GOPATH in front of it holds a
# symbolic link to this directory under the package's import path. Nothing
# is written to the tree: the build cache is temporary too.
set -euo pipefail
cd "$(dirname "$0")"
import_path=github.com/pg-fencing/pg_fencing/clients/go
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src/$(dirname "$import_path")"
ln -s "$PWD" "$work/src/$import_path"

export GO111MODULE=off GOPATH="$work:/usr/share/gocode" GOFLAGS=-p=2
export GOCACHE="${PG_FENCING_GOCACHE:-$work/cache}"  # set it to keep the compiled pgx between runs

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "not gofmt'd: $unformatted" >&2
  exit 1
fi
go vet "$import_path"
go test -count=1 -timeout 120s "$@" "$import_path"
