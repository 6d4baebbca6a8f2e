// fencing_grant(): a token from the extension's sequence, made durable
// before it leaves the function.
//
// nextval() writes a WAL record only every 32 values ("log ahead") and does
// not flush it: the record reaches disk with the next commit of a
// transaction that has an xid, or when the WAL writer gets to it.  If the
// transaction that fetched the value rolls back, or commits with
// synchronous_commit = off, and the server crashes first, recovery rewinds
// the sequence and the same value is handed out again.  A token handed out
// twice breaks fencing, so we flush the WAL up to the sequence page's LSN,
// which covers the record that logged the value we return (whichever
// backend wrote it).  When that record is already on disk -- 31 calls out of
// 32 without a checkpoint in between -- XLogFlush returns at once.
#include "boundary.hpp"

extern "C" {
#include "access/relation.h"
#include "access/xlog.h"
#include "commands/sequence.h"
#include "storage/bufmgr.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

namespace pg_fencing {
namespace {

constexpr const char *kTokenSequence = "fencing_token_seq";

// The sequence lives in the extension's schema, which is where this
// function lives too; the OID is cached for the life of the FmgrInfo.
Oid TokenSequenceOid(FunctionCallInfo fcinfo) {
  FmgrInfo *flinfo = fcinfo->flinfo;
  if (flinfo->fn_extra != nullptr) return *static_cast<Oid *>(flinfo->fn_extra);

  const Oid schema = get_func_namespace(flinfo->fn_oid);
  const Oid seq = get_relname_relid(kTokenSequence, schema);
  if (!OidIsValid(seq)) {
    ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                    errmsg("sequence \"%s\" of extension pg_fencing does not exist in schema \"%s\"",
                           kTokenSequence, get_namespace_name(schema)),
                    errhint("Reinstall the extension: DROP EXTENSION pg_fencing; CREATE EXTENSION "
                            "pg_fencing.")));
  }
  Oid *cached = static_cast<Oid *>(MemoryContextAlloc(flinfo->fn_mcxt, sizeof(Oid)));
  *cached = seq;
  flinfo->fn_extra = cached;
  return seq;
}

// LSN of the last WAL record applied to the sequence's only page.
XLogRecPtr SequencePageLsn(Oid seq) {
  Relation rel = relation_open(seq, AccessShareLock);
  Buffer buf = ReadBuffer(rel, 0);
  const XLogRecPtr lsn = BufferGetLSNAtomic(buf);
  ReleaseBuffer(buf);
  relation_close(rel, AccessShareLock);
  return lsn;
}

}  // namespace
}  // namespace pg_fencing

using namespace pg_fencing;

extern "C" {

PG_FUNCTION_INFO_V1(fencing_grant);
Datum fencing_grant(PG_FUNCTION_ARGS) {
  // Checked here so the error names fencing_grant(), not nextval().
  PreventCommandIfReadOnly("fencing_grant()");
  const Oid seq = TokenSequenceOid(fcinfo);
  // Callers need EXECUTE on fencing_grant, not USAGE on the sequence, which
  // stays private to the extension.
  const int64 token = nextval_internal(seq, false);
  XLogFlush(SequencePageLsn(seq));
  PG_RETURN_INT64(token);
}

}  // extern "C"
