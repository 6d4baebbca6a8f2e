/* Prototypes measured by bench/callgrind.sh and bench/bulk_update.sh, not part
 * of the extension: the guard's per-row comparison as an AFTER UPDATE row
 * trigger and as an AFTER UPDATE statement trigger over the transition tables,
 * to count what PostgreSQL's machinery costs each way.  The token is column 2. */
#include "postgres.h"
#include "fmgr.h"
#include "access/htup_details.h"
#include "commands/trigger.h"
#include "executor/tuptable.h"
#include "utils/rel.h"
#include "utils/tuplestore.h"

PG_MODULE_MAGIC;

static void
judge(int64 old_token, bool old_null, int64 new_token, bool new_null)
{
	if (new_null)
		ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED), errmsg("missing token")));
	if (!old_null && new_token < old_token)
		ereport(ERROR, (errcode(ERRCODE_RAISE_EXCEPTION), errmsg("stale token")));
}

PG_FUNCTION_INFO_V1(proto_after_row);
Datum
proto_after_row(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc desc = RelationGetDescr(td->tg_relation);
	bool on, nn;
	int64 o = DatumGetInt64(heap_getattr(td->tg_trigtuple, 2, desc, &on));
	int64 n = DatumGetInt64(heap_getattr(td->tg_newtuple, 2, desc, &nn));
	judge(o, on, n, nn);
	return PointerGetDatum(NULL);
}

PG_FUNCTION_INFO_V1(proto_after_statement);
Datum
proto_after_statement(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	TupleDesc desc = RelationGetDescr(td->tg_relation);
	TupleTableSlot *os = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	TupleTableSlot *ns = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	tuplestore_rescan(td->tg_oldtable);
	tuplestore_rescan(td->tg_newtable);
	while (tuplestore_gettupleslot(td->tg_oldtable, true, false, os) &&
		   tuplestore_gettupleslot(td->tg_newtable, true, false, ns))
	{
		bool on, nn;
		int64 o = DatumGetInt64(slot_getattr(os, 2, &on));
		int64 n = DatumGetInt64(slot_getattr(ns, 2, &nn));
		judge(o, on, n, nn);
	}
	ExecDropSingleTupleTableSlot(os);
	ExecDropSingleTupleTableSlot(ns);
	return PointerGetDatum(NULL);
}
