// Work done at XACT_EVENT_COMMIT, after the commit record: an ERROR there
// would become a PANIC ("cannot abort transaction, it was already
// committed"), so none may escape.  What runs here is a courtesy to other
// sessions (a wake-up, a statistic) and is dropped on error.
#pragma once

#include "boundary.hpp"

extern "C" {
#include "utils/elog.h"
#include "utils/palloc.h"
}

namespace pg_fencing {

// Calls work(); an error it raises is discarded.  work must keep only
// trivially destructible objects in its frames (ereport longjmps).
template <typename Work>
void IgnoringErrorsAfterCommit(Work work) {
  MemoryContext context = CurrentMemoryContext;
  PG_TRY();
  { work(); }
  PG_CATCH();
  {
    MemoryContextSwitchTo(context);
    FlushErrorState();
  }
  PG_END_TRY();
}

}  // namespace pg_fencing
