// What the guard shares with the check an UPDATE makes in its own
// projection (update_check.cpp): which guard triggers that check can stand
// in for, and the SQL function it calls.
#pragma once

#include "boundary.hpp"

extern "C" {
#include "utils/relcache.h"
#include "utils/reltrigger.h"
}

namespace pg_fencing {

// The column a fencing_guard trigger fences, if a check in an UPDATE's
// projection can judge the rows in the trigger's place: the trigger's
// arguments parse, the column has type fencing_token itself (not a domain),
// and the options do not include skip (a projection cannot leave a row
// alone).  InvalidAttrNumber otherwise, and then the trigger judges.
AttrNumber ColumnCheckableInProjection(Relation rel, const Trigger *trigger, Oid token_type);

}  // namespace pg_fencing

extern "C" {
// The trigger function, and the check the planner puts in its place.
extern PGDLLEXPORT Datum fencing_guard(PG_FUNCTION_ARGS);
extern PGDLLEXPORT Datum fencing_guard_check(PG_FUNCTION_ARGS);
}
