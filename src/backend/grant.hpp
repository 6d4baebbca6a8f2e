// Tokens: fencing_grant() and the lease grants take them from here.
#pragma once

#include "boundary.hpp"

namespace pg_fencing {

// A new token from the extension's sequence in schema, durable (and
// replicated to synchronous standbys) before it is returned; see grant.cpp.
int64 GrantToken(Oid schema);

// The highest token the database in schema has reserved, as this backend
// knows it, looked up again when token is above what it knew: a token at
// or below the answer was handed out (or reserved to be), one above it
// never was.
int64 HighestGrantedFor(Oid schema, int64 token);

// Whether token is at or below the highest grant this backend knows of in
// schema's database: then it was granted, with no look-up (the guard's
// per-row path: two comparisons).  False says only "look it up".
extern int64 highest_grant_known;
extern Oid highest_grant_known_schema;
inline bool WithinKnownGrants(Oid schema, int64 token) {
  return token <= highest_grant_known && highest_grant_known_schema == schema;
}

// The reserved ranges in shared memory (preloaded, pg_fencing.reserve_tokens
// on): the module's shared-memory request and startup hooks call these.
void RequestGrantMemory();
void AttachGrantMemory();

}  // namespace pg_fencing
