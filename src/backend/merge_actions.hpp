// MERGE and the guard: did the UPDATE that fired the trigger assign the
// token column?  For MERGE, tg_updatedcols is the union of every UPDATE
// action's SET list, so it cannot answer alone (issue 10, item 3).
#pragma once

#include "boundary.hpp"

extern "C" {
#include "commands/trigger.h"
}

namespace pg_fencing {

// Installs the ExecutorStart hook that records running MERGE plans, and
// notes when the library was loaded.  Called once, from _PG_init.
void RegisterMergeTracking();

// Whether the UPDATE (or MERGE UPDATE action) that fired td assigned column
// attnum; token_unchanged says whether the new row's token equals the old
// row's (both NULL counts as equal), which the guard has read already.
// Fails closed: where it cannot tell, it answers false, which the guard
// treats as a write that carries no token.
bool UpdateAssignsColumn(const TriggerData *td, AttrNumber attnum, bool token_unchanged);

}  // namespace pg_fencing
