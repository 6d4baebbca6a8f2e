// Module entry: the magic block and the boundary's error reporter.
#include "boundary.hpp"
#include "durable_commit.hpp"
#include "fences.hpp"
#include "merge_actions.hpp"

extern "C" {
PG_MODULE_MAGIC;

void _PG_init(void);
void _PG_init(void) {
  pg_fencing::RegisterFenceCallbacks();
  pg_fencing::RegisterDurableCommitCallback();
  pg_fencing::RegisterMergeTracking();
}
}

namespace pg_fencing {

void ReportCxxException(const char *what) {
  ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                  errmsg("pg_fencing: unexpected C++ exception: %s", what[0] ? what : "(unknown)")));
  pg_unreachable();
}

}  // namespace pg_fencing
