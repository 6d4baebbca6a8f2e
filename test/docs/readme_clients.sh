#!/bin/bash
# The README's client examples, run as they stand: each code block of its
# section "From a program: the clients" (python, js, go, java) is taken from
# README.md itself, installed the way the line above it says, given only the
# scaffolding its language needs to run (imports, a main), and run against
# the server named by the PG* variables, on the quick start's table.  Each
# must leave its own value in the row, under a token above the one before,
# and release its lease.  From the repository's root, as root:
#
#   source scripts/lib.sh; with_throwaway_cluster bash test/docs/readme_clients.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The block of language $1 in the README's section; fails when there is none.
block() {
  awk -v lang="$1" '
    /^### From a program: the clients/ { in_section = 1; next }
    in_section && /^##/ { exit }
    in_section && $0 == "```" lang { in_block = 1; found = 1; next }
    in_block && /^```/ { in_block = 0; next }
    in_block { print }
    END { exit found ? 0 : 1 }' README.md
}

sql() { psql -X -q -A -t -v ON_ERROR_STOP=1 -c "$1"; }

sql "CREATE EXTENSION IF NOT EXISTS pg_fencing"
sql "SET client_min_messages = warning; DROP TABLE IF EXISTS resource"
sql "CREATE TABLE resource (id int PRIMARY KEY, token fencing_token, val text)"
sql "INSERT INTO resource VALUES (1, NULL, 'initial')"
sql "SELECT fencing_protect('resource')" >/dev/null

last_token=0
# Runs the block of language $1 (already installed and wrapped by the
# caller's command, the rest of the arguments) and checks what it left.
check() {
  local lang=$1 expected=$2
  shift 2
  echo "--- README's $lang example"
  # An example that does not end by itself (a connection left open keeps
  # Node.js running) fails here rather than hanging the test command.
  if ! timeout 60 "$@"; then
    echo "the $lang example failed or did not end within 60 s" >&2
    return 1
  fi
  local row
  row=$(sql "SELECT val, token::bigint FROM resource WHERE id = 1")
  local val=${row%%|*} token=${row##*|}
  if [[ $val != "$expected" ]]; then
    echo "the $lang example left val '$val', not '$expected'" >&2
    return 1
  fi
  if ((token <= last_token)); then
    echo "the $lang example wrote under token $token, not above the last one, $last_token" >&2
    return 1
  fi
  last_token=$token
  local state
  state=$(sql "SELECT state FROM fencing_leases WHERE lock_name = 'resource-writer'")
  if [[ $state != released ]]; then
    echo "the $lang example left its lease $state, not released" >&2
    return 1
  fi
}

# Python: PYTHONPATH=clients/python (Debian's python3, which python3-psycopg is for).
block python >"$work/example.py"
check python py env PYTHONPATH="$ROOT/clients/python" /usr/bin/python3 "$work/example.py"

# Node.js: npm install --install-links of the package into an application of its own.
mkdir "$work/node-app"
block js >"$work/node-app/example.mjs"
echo '{ "name": "readme-example", "private": true }' >"$work/node-app/package.json"
(cd "$work/node-app" && npm install --no-audit --no-fund --loglevel=error --install-links "$ROOT/clients/node" >/dev/null)
check js js node "$work/node-app/example.mjs"

# Go: offline, in GOPATH mode over Debian's sources (clients/go/README.md).
import_path=github.com/pg-fencing/pg_fencing/clients/go
mkdir -p "$work/gopath/src/$(dirname "$import_path")" "$work/gopath/src/readme-example"
ln -s "$ROOT/clients/go" "$work/gopath/src/$import_path"
{
  cat <<EOF
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v4"
	fencing "$import_path"
)

func run(ctx context.Context) error {
EOF
  block go | sed 's/^/\t/'
  cat <<'EOF'
	return err
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
EOF
} >"$work/gopath/src/readme-example/main.go"
(cd "$work/gopath/src/readme-example" &&
  GO111MODULE=off GOPATH="$work/gopath:/usr/share/gocode" GOCACHE="${PG_FENCING_GOCACHE:-$work/gocache}" \
    go build -o "$work/go-example" .)
check go go "$work/go-example"

# Java: build.sh's jar and pgjdbc on the class path.
bash clients/java/build.sh >/dev/null
mkdir "$work/java"
{
  cat <<'EOF'
import io.pgfencing.*;
import java.sql.Connection;

public class Example {
    public static void main(String[] args) throws Exception {
EOF
  block java | sed 's/^/        /'
  cat <<'EOF'
    }
}
EOF
} >"$work/java/Example.java"
classpath="$ROOT/clients/java/build/pg-fencing.jar:/usr/share/java/postgresql.jar"
javac -d "$work/java" -cp "$classpath" "$work/java/Example.java"
check java java java -cp "$work/java:$classpath" Example

echo "the README's client examples: all 4 ran and wrote under a new token"
