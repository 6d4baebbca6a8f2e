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
//
// The same goes for a failover: with synchronous replication configured, a
// standby promoted after a crash must not hand out a token the old primary
// already gave away.  So, like a commit, a grant waits until that WAL has
// reached the synchronous standbys (as synchronous_commit asks, capped at
// remote flush), and a cancel or statement_timeout during that wait fails
// the grant instead of handing out an unreplicated token.
#include "boundary.hpp"

extern "C" {
#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "commands/sequence.h"
#include "storage/bufmgr.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "utils/elog.h"
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

// Set when PostgreSQL's synchronous replication wait gives up early.
bool sync_wait_abandoned = false;
emit_log_hook_type previous_emit_log_hook = nullptr;

// SyncRepWaitForLSN() reports a cancel or terminate during the wait only
// as a WARNING and returns as if the wait were over (for a commit, there is
// nothing else to do).  Its state is private to syncrep.c, so we learn of
// it from that WARNING, by its untranslated message, while the wait runs,
// and keep its misleading "already committed locally" from the client.
void NoteAbandonedSyncWait(ErrorData *edata) {
  if (edata->elevel == WARNING && edata->message_id != nullptr &&
      strstr(edata->message_id, "wait for synchronous replication") != nullptr) {
    sync_wait_abandoned = true;
    edata->output_to_client = false;
  }
  if (previous_emit_log_hook != nullptr) previous_emit_log_hook(edata);
}

// Waits, like a commit, until the synchronous standbys have the WAL up to
// lsn (returns at once when synchronous replication is not in use); a
// cancel, statement_timeout or terminate during the wait fails the grant.
void WaitForSynchronousStandbys(XLogRecPtr lsn) {
  if (!SyncRepRequested()) return;
  sync_wait_abandoned = false;
  previous_emit_log_hook = emit_log_hook;
  emit_log_hook = NoteAbandonedSyncWait;
  HOLD_INTERRUPTS();  // as for a commit: the wait itself watches for them
  PG_TRY();
  {
    SyncRepWaitForLSN(lsn, false);
  }
  PG_FINALLY();
  {
    emit_log_hook = previous_emit_log_hook;
  }
  PG_END_TRY();
  RESUME_INTERRUPTS();
  CHECK_FOR_INTERRUPTS();  // a pending terminate ends the backend here
  if (sync_wait_abandoned) {
    ereport(ERROR, (errcode(ERRCODE_QUERY_CANCELED),
                    errmsg("fencing_grant() canceled while waiting for synchronous replication"),
                    errdetail("The token was not handed out: its WAL may not have reached the "
                              "synchronous standbys, and a standby promoted now could grant it "
                              "again.")));
  }
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
  const XLogRecPtr lsn = SequencePageLsn(seq);
  XLogFlush(lsn);
  WaitForSynchronousStandbys(lsn);
  PG_RETURN_INT64(token);
}

}  // extern "C"
